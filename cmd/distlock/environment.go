package main

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Environment is the machine a report was measured on.
type Environment struct {
	Time        time.Time `json:"time"`
	Host        string    `json:"host"`
	GoVersion   string    `json:"go_version"`
	OS          string    `json:"os"`
	Kernel      string    `json:"kernel,omitempty"`
	CPU         string    `json:"cpu,omitempty"`
	Cores       int       `json:"cores"`
	GOMAXPROCS  int       `json:"gomaxprocs"`
	LoadAvg     string    `json:"load_avg,omitempty"`     // 1, 5, 15 min, at the start
	LoadAvgEnd  string    `json:"load_avg_end,omitempty"` // at the end
	LoopbackRTT float64   `json:"loopback_rtt_us"`        // median TCP round trip on 127.0.0.1, µs
	FsyncMs     float64   `json:"fsync_ms"`               // median 4 KiB write+fsync in the temp dir
	FsyncDir    string    `json:"fsync_dir"`
	Servers     []string  `json:"servers"` // backend URL → what serves it
	Notes       []string  `json:"notes,omitempty"`
}

func measureEnvironment(dir string) Environment {
	host, _ := os.Hostname()
	e := Environment{
		Time:       time.Now().UTC(),
		Host:       host,
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Kernel:     readTrim("/proc/sys/kernel/osrelease"),
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		LoadAvg:    loadAvg(),
		FsyncDir:   dir,
	}
	e.LoopbackRTT = loopbackRTT(500)
	e.FsyncMs = fsyncLatency(dir, 20)
	return e
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loopbackRTT is the median time of n one-byte TCP ping-pongs on 127.0.0.1,
// in µs: the floor under every networked backend's latency.
func loopbackRTT(n int) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1)
	var ds []float64
	for range n {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			break
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			break
		}
		ds = append(ds, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	return median(ds)
}

// fsyncLatency is the median time of n 4 KiB write+fsync rounds to a file
// in dir, in ms: what a durably configured server pays per write.
func fsyncLatency(dir string, n int) float64 {
	f, err := os.CreateTemp(dir, "fsync-probe-")
	if err != nil {
		return 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var ds []float64
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			break
		}
		if err := f.Sync(); err != nil {
			break
		}
		ds = append(ds, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	return median(ds)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// absDir returns dir made absolute, for the report.
func absDir(dir string) string {
	if a, err := filepath.Abs(dir); err == nil {
		return a
	}
	return dir
}
