package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const zkJar = "/usr/share/java/zookeeper.jar" // Debian's; its manifest Class-Path lists its dependencies

// ZooKeeper starts a standalone ZooKeeper server.
func ZooKeeper(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return ZooKeeperEnsemble(t, 1, opts...).Members[0]
}

// ZooKeeperEnsemble starts a ZooKeeper ensemble of n servers (a standalone
// server for n == 1). A member is ready when it serves as leader, follower or
// standalone, which for an ensemble needs a quorum.
func ZooKeeperEnsemble(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	cfg := newConfig(opts)
	sp, err := zkSpec(cfg, n)
	return &Cluster{Members: startGroup(t, cfg, n, mustSpec(t, sp, err))}
}

// zkSpec describes an ensemble of n ZooKeeper servers under cfg.
func zkSpec(cfg *config, n int) (spec, error) {
	java, err := lookBinary("java", "java", "/usr/bin/java")
	if err != nil {
		return spec{}, err
	}
	jar, err := lookBinary("ZooKeeper ("+zkJar+")", zkJar)
	if err != nil {
		return spec{}, err
	}
	// slf4j needs a binding or ZooKeeper logs nothing; Debian ships log4j 1.2 for it.
	cp := []string{jar}
	for _, p := range []string{"/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar"} {
		if _, err := os.Stat(p); err == nil {
			cp = append(cp, p)
		}
	}
	nports := 1
	if n > 1 {
		nports = 3 // client, quorum, election
	}
	tick := max(cfg.zkTick.Milliseconds(), 1)
	maxSession := int64(60000)
	if cfg.zkMaxSession > 0 {
		maxSession = max(cfg.zkMaxSession.Milliseconds(), 2*tick)
	}
	return spec{
		kind: "zookeeper", nports: nports, timeout: 30 * time.Second,
		setup: func(ms []*Server) error {
			for i, s := range ms {
				data := filepath.Join(s.dir, "data")
				if err := os.Mkdir(data, 0o755); err != nil {
					return err
				}
				conf := []string{
					fmt.Sprintf("tickTime=%d", tick),
					// Limits are in ticks; keep them about 10 s and 3 s whatever the tick,
					// so that a starved JVM on a loaded machine does not drop out.
					fmt.Sprintf("initLimit=%d", max(10000/tick, 10)),
					fmt.Sprintf("syncLimit=%d", max(3000/tick, 5)),
					"dataDir=" + data,
					fmt.Sprintf("clientPort=%d", s.port),
					"clientPortAddress=127.0.0.1",
					fmt.Sprintf("minSessionTimeout=%d", 2*tick),
					fmt.Sprintf("maxSessionTimeout=%d", maxSession),
					"maxClientCnxns=0",
					"4lw.commands.whitelist=*",
					"admin.enableServer=false",
				}
				if n > 1 {
					for j, m := range ms {
						conf = append(conf, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", j+1, m.ports[1], m.ports[2]))
					}
					if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
						return err
					}
				}
				cfgPath := filepath.Join(s.dir, "zoo.cfg")
				if err := os.WriteFile(cfgPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
					return err
				}
				// Log to stdout, which is the log file, so JVM errors land there too.
				log4j := filepath.Join(s.dir, "log4j.properties")
				if err := os.WriteFile(log4j, []byte(log4jProps), 0o644); err != nil {
					return err
				}
				s.bin = java
				s.args = []string{
					// Small and quick to start: the servers idle, and a JIT beyond C1 only costs CPU here.
					"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
					"-Djava.net.preferIPv4Stack=true",
					"-Dzookeeper.admin.enableServer=false",
					"-Dzookeeper.jmx.log4j.disable=true",
					"-Dzookeeper.cnxTimeout=1000", // election connects to a paused peer give up sooner than 5 s
					"-Dlog4j.configuration=file:" + log4j,
				}
				s.args = append(s.args, zkReaperProps(cfg)...)
				s.args = append(s.args, "-cp", strings.Join(cp, ":"),
					"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
				s.ready = func(ctx context.Context) error {
					_, err := zkModeCtx(ctx, s)
					return err
				}
			}
			return nil
		},
	}, nil
}

// zkReaperProps sets the container reaper's settings as system properties:
// the server reads them only from the JVM, not from zoo.cfg.
func zkReaperProps(cfg *config) []string {
	var props []string
	if cfg.zkReapInterval > 0 {
		props = append(props, fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", max(cfg.zkReapInterval.Milliseconds(), 1)))
	}
	if cfg.zkReapPerMinute > 0 {
		props = append(props, fmt.Sprintf("-Dznode.container.maxPerMinute=%d", cfg.zkReapPerMinute))
	}
	return props
}

const log4jProps = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
`

func zkMode(s *Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return zkModeCtx(ctx, s)
}

// zkModeCtx returns the "Mode:" line of the srvr four-letter command. Unlike
// ruok, which answers imok as soon as the process runs, srvr only reports a
// mode while the server serves requests.
func zkModeCtx(ctx context.Context, s *Server) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(c)
	var first string
	for sc.Scan() {
		line := sc.Text()
		if first == "" {
			first = line
		}
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return mode, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("srvr: %q", first)
}
