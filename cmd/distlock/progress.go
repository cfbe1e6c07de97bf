package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows on stderr what bench is doing: one updating line with a
// bar on a terminal, plain lines otherwise.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
	tty   bool
	total int
	n     int
	began time.Time
	width int // of the last status line, to clear it
}

func newProgress(w io.Writer, quiet bool) *progress {
	p := &progress{w: w, quiet: quiet, began: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// note prints a message on its own line.
func (p *progress) note(msg string) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, "distlock: %s\n", msg)
}

// step starts step n+1 of total.
func (p *progress) step(what string) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	el := time.Since(p.began).Round(time.Second)
	if !p.tty {
		fmt.Fprintf(p.w, "[%d/%d %v] %s\n", p.n, p.total, el, what)
		return
	}
	const barLen = 24
	done := 0
	if p.total > 0 {
		done = barLen * (p.n - 1) / p.total
	}
	line := fmt.Sprintf("[%s%s] %d/%d %v %s", strings.Repeat("#", done), strings.Repeat(".", barLen-done), p.n, p.total, el, what)
	p.clear()
	fmt.Fprint(p.w, line)
	p.width = len(line)
}

func (p *progress) clear() {
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

func (p *progress) done() {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, "distlock: %d measurements in %v\n", p.n, time.Since(p.began).Round(time.Millisecond))
}
