package redis_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
)

// go-redis logs a failed dial ("connection pool: failed to dial after …")
// on its process-wide logger, which writes to stderr. For the clients Open
// dials, the lines must go to WithLogger's logger, or nowhere. The check
// runs in a child process, since go-redis's default logger holds the stderr
// of the process it started in.
func TestGoRedisLogsGoThroughWithLogger(t *testing.T) {
	if addrs := os.Getenv("DISTLOCK_LOGS_CHILD"); addrs != "" {
		logsChild(strings.Split(addrs, ","))
		return
	}
	// Three ports with nothing listening (Redlock refuses a server named
	// twice): every dial fails.
	var addrs []string
	var lns []net.Listener
	for range 3 { // each held until all three are taken, so that they differ
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns, addrs = append(lns, ln), append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestGoRedisLogsGoThroughWithLogger$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DISTLOCK_LOGS_CHILD="+strings.Join(addrs, ","))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("go-redis wrote to stderr past WithLogger:\n%s", stderr.String())
	}
	for _, scheme := range []string{"redis", "redlock"} {
		if !strings.Contains(stdout.String(), "LOGGER "+scheme+": ") ||
			!strings.Contains(stdout.String(), "failed to dial") {
			t.Errorf("%s: go-redis's dial failure did not reach the logger given with WithLogger; child stdout:\n%s",
				scheme, stdout.String())
		}
	}
}

// logsChild opens each scheme against addrs with a logger that prints to
// stdout, then without a logger; stderr must stay empty throughout.
func logsChild(addrs []string) {
	urls := map[string]string{
		"redis":   "redis://" + addrs[0],
		"redlock": "redlock://" + strings.Join(addrs, ","),
	}
	for scheme, u := range urls {
		for _, withLogger := range []bool{true, false} {
			var opts []distlock.Option
			if withLogger {
				h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
					ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
						if a.Key == slog.MessageKey {
							a.Value = slog.StringValue("LOGGER " + scheme + ": " + a.Value.String())
						}
						return a
					},
				})
				opts = append(opts, distlock.WithLogger(slog.New(h)))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			l, err := distlock.Open(ctx, u, opts...)
			cancel()
			if !errors.Is(err, distlock.ErrUnavailable) {
				os.Stdout.WriteString("unexpected Open result for " + u + "\n")
				if l != nil {
					l.Close()
				}
				os.Exit(3)
			}
		}
	}
}
