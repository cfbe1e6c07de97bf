package redlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// securedNodes are three Redis nodes with TLS (client certificates
// required) and an ACL file: users app (the documented least privileges),
// nopub (without PUBLISH), noeval (without EVAL and EVALSHA) and admin.
type securedNodes struct {
	hosts  []string
	ca     *testserver.CA
	cert   testserver.KeyPair // a client certificate of ca
	dir    string             // holds the password files
	admins []goredis.UniversalClient
}

const securedPrefix = "sec:"

func newSecuredNodes(t *testing.T) *securedNodes {
	t.Helper()
	rules := testserver.RedisLockACL(securedPrefix)
	ca := testserver.NewCA(t)
	srvs := testserver.RedisN(t, 3, testserver.WithRedisTLS(ca), testserver.WithRedisACL(
		"user default off",
		"user admin on >admin-pw ~* &* +@all",
		"user app on >app-pw "+rules,
		"user nopub on >nopub-pw "+strings.Replace(rules, " +publish", "", 1),
		"user noeval on >noeval-pw "+strings.Replace(rules, " +evalsha +eval", "", 1),
	))
	s := &securedNodes{ca: ca, cert: ca.Client(t, "app"), dir: t.TempDir()}
	for _, srv := range srvs {
		s.hosts = append(s.hosts, srv.Addr())
		a := goredis.NewClient(&goredis.Options{
			Addr: srv.Addr(), Username: "admin", Password: "admin-pw", ContextTimeoutEnabled: true,
			TLSConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{s.cert.TLS}, ServerName: "127.0.0.1"},
		})
		t.Cleanup(func() { _ = a.Close() })
		s.admins = append(s.admins, a)
	}
	return s
}

// url is a redlock:// URL of user with password (from a file), the CA and,
// if withCert, the client certificate, and extra parameters.
func (s *securedNodes) url(t *testing.T, user, password string, withCert bool, extra url.Values) string {
	t.Helper()
	pw := filepath.Join(s.dir, user+"-"+password)
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// 400ms per node: under -race, with other packages' servers on the
	// same two cores, every node missed a 150ms timeout now and then,
	// failing an Acquire with ErrNoQuorum.
	q := url.Values{"tls": {"true"}, "password_file": {pw}, "ca_file": {s.ca.File}, "prefix": {securedPrefix}, "node_timeout": {"400ms"}}
	if withCert {
		q.Set("cert_file", s.cert.CertFile)
		q.Set("key_file", s.cert.KeyFile)
	}
	for k, v := range extra {
		q[k] = v
	}
	return "redlock://" + user + "@" + strings.Join(s.hosts, ",") + "/?" + q.Encode()
}

// Reached by a redlock:// URL with tls=true: one set of nodes for every
// case. (TestConformance runs the suite on such nodes.)
func TestSecured(t *testing.T) {
	s := newSecuredNodes(t)
	rawURL := func(user, password string, withCert bool) string { return s.url(t, user, password, withCert, nil) }
	open := func(t *testing.T, raw string) distlock.Locker {
		t.Helper()
		l, err := distlock.Open(t.Context(), raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}

	// With only the documented privileges, over TLS: locks hand off by
	// notice, and tokens increase.
	t.Run("LeastPrivilege", func(t *testing.T) {
		a, b := open(t, rawURL("app", "app-pw", true)), open(t, rawURL("app", "app-pw", true))
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		la, err := a.TryAcquire(ctx, "k", distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(200*time.Millisecond, func() { _ = la.Release(context.Background()) })
		start := time.Now()
		lb, err := b.Acquire(ctx, "k", distlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the waiter took %v: polled, not woken by a notice", d)
		}
		if lb.Token() <= la.Token() {
			t.Errorf("token %d not above %d", lb.Token(), la.Token())
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// Refusals are ErrAccessDenied, promptly, never ErrUnavailable (nor
	// ErrNoQuorum, which a waiting Acquire retries).
	isDenied := func(t *testing.T, what string, err error, start time.Time) {
		t.Helper()
		if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("%s: %v: want ErrAccessDenied, not ErrUnavailable", what, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v", what, d)
		}
	}
	t.Run("RefusedAtOpen", func(t *testing.T) {
		for name, raw := range map[string]string{
			"wrong password":        rawURL("app", "not-the-pw", true),
			"no client certificate": rawURL("app", "app-pw", false),
		} {
			start := time.Now()
			l, err := distlock.Open(t.Context(), raw)
			if err == nil {
				_ = l.Close()
				t.Errorf("%s: Open succeeded", name)
				continue
			}
			isDenied(t, name, err, start)
			if strings.Contains(err.Error(), "not-the-pw") {
				t.Errorf("%s: %v shows the password", name, err)
			}
		}
	})
	t.Run("NoPermission", func(t *testing.T) {
		l := open(t, rawURL("noeval", "noeval-pw", true))
		start := time.Now()
		_, err := l.TryAcquire(t.Context(), "k")
		isDenied(t, "TryAcquire", err, start)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start = time.Now()
		_, err = l.Acquire(ctx, "k")
		isDenied(t, "Acquire", err, start)
	})
	// Without PUBLISH the release still frees the lock and succeeds.
	t.Run("PublishDenied", func(t *testing.T) {
		l := open(t, rawURL("nopub", "nopub-pw", true))
		ctx := t.Context()
		ls, err := l.TryAcquire(ctx, "pub")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if errors.Is(ls.Err(), distlock.ErrLeaseLost) {
			t.Errorf("released lease reports %v", ls.Err())
		}
		ls, err = l.TryAcquire(ctx, "pub")
		if err != nil {
			t.Fatalf("the key is not free after the release: %v", err)
		}
		_ = ls.Release(ctx)
	})
}
