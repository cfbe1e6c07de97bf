package all_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// No error of Open names a URL's password, whatever is wrong with the URL
// or the server behind it: malformed, unknown scheme or parameter, bad
// values, nothing listening.
func TestOpenErrorsNeverShowThePassword(t *testing.T) {
	const secret = "Sup3r-s3cret"
	refused := refusedAddr(t)
	shapes := []string{
		"redis://user:" + secret + "@" + refused,
		"redis://:" + secret + "@" + refused + "/0",
		"rediss://user:" + secret + "@" + refused,
		"redis://user:" + secret + "@" + refused + "?tll=5s",
		"redis://user:" + secret + "@" + refused + "?ttl=forever",
		"redis://user:" + secret + "@" + refused + "/notadb",
		"redis://user:" + secret + "@h :6379",
		"redis://user:" + secret + "@[::1",
		"redis://user:" + secret + "@" + refused + "/%zz",
		"redlock://u:" + secret + "@" + refused + "," + refused + "," + refused,
		"redlock://u:" + secret + "@" + refused,
		"redlock://u:" + secret + "@[::1]:1,h:2,h:3",
		"etcd://root:" + secret + "@" + refused + "/?dial_timeout=300ms",
		"etcd://root:" + secret + "@" + refused + "/?bogus=1",
		"zk://alice:" + secret + "@" + refused + "/locks?session_timeout=1s",
		"zk://alice:" + secret + "@" + refused + "/locks?session_timeout=nope",
		"unknown://u:" + secret + "@h:1",
		"u:" + secret + "@h:1",
		"://u:" + secret + "@h:1",
		"redis://user:" + secret + "@" + refused + "?password_file=/nonexistent/p",
		"mem://u:" + secret + "@?ttl=-1s",
		"redis://user:" + secret + "@" + refused + "?fence_epoch=-3",
		"postgres://app:" + secret + "@" + refused + "/db",
		"postgres://app:" + secret + "@" + refused + "/db?sslmode=bogus",
		"postgresql://app:" + secret + "@" + refused + "/db?table=Bad&notify=maybe",
		"postgres://app:4242/" + secret + "@" + refused + "/db",
		// A password with '/', '#' or '?' not percent-encoded: url.Parse
		// ends the userinfo early and reads the rest as host, path or
		// query, and its own error quotes what it found there.
		"redis://user:" + secret + "/" + secret + "@" + refused + "/0",
		"rediss://user:" + secret + "#" + secret + "@" + refused,
		"redis://user:" + secret + "?" + secret + "@" + refused,
		"redis://user:4242/" + secret + "@" + refused,
		"redlock://u:4242/" + secret + "@" + refused + "," + refused + "," + refused,
		"etcd://root:4242/" + secret + "@" + refused + "/?dial_timeout=300ms",
		"zk://alice:4242/" + secret + "@" + refused + "/locks",
	}
	if len(shapes) < 20 {
		t.Fatalf("%d shapes: the table needs at least 20", len(shapes))
	}
	for _, raw := range shapes {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		l, err := distlock.Open(ctx, raw)
		cancel()
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}
