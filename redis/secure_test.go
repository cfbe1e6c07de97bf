package redis_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redis"
)

// secured is a Redis that speaks only TLS, to clients with a certificate of
// its CA, and only to the users of its ACL file.
type secured struct {
	srv    *testserver.Server
	ca     *testserver.CA
	cert   testserver.KeyPair // a client certificate of ca
	dir    string             // holds the password files
	admin  *goredis.Client
	prefix string
}

// ACL users of the secured server; each password is the user's name + "-pw".
const (
	userApp    = "app"    // the documented least privileges
	userNoPub  = "nopub"  // … without PUBLISH
	userNoSub  = "nosub"  // … without SUBSCRIBE
	userNoEval = "noeval" // … without EVAL and EVALSHA
)

func newSecured(t *testing.T) *secured {
	t.Helper()
	const prefix = "sec:"
	rules := testserver.RedisLockACL(prefix)
	ca := testserver.NewCA(t)
	srv := testserver.Redis(t, testserver.WithRedisTLS(ca), testserver.WithRedisACL(
		"user default off",
		"user admin on >admin-pw ~* &* +@all",
		"user "+userApp+" on >"+userApp+"-pw "+rules,
		"user "+userNoPub+" on >"+userNoPub+"-pw "+strings.Replace(rules, " +publish", "", 1),
		"user "+userNoSub+" on >"+userNoSub+"-pw "+strings.Replace(rules, " +subscribe", "", 1),
		"user "+userNoEval+" on >"+userNoEval+"-pw "+strings.Replace(rules, " +evalsha +eval", "", 1),
	))
	s := &secured{srv: srv, ca: ca, cert: ca.Client(t, "app"), dir: t.TempDir(), prefix: prefix}
	s.admin = goredis.NewClient(&goredis.Options{
		Addr: srv.Addr(), Username: "admin", Password: "admin-pw", ContextTimeoutEnabled: true,
		TLSConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{s.cert.TLS}, ServerName: "127.0.0.1"},
	})
	t.Cleanup(func() { _ = s.admin.Close() })
	return s
}

// passwordFile writes password to a file and returns its path.
func (s *secured) passwordFile(t *testing.T, password string) string {
	t.Helper()
	f, err := os.CreateTemp(s.dir, "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(password + "\n"); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// url is a rediss:// URL of user (password from a file) with the CA and
// the client certificate, and extra parameters.
func (s *secured) url(t *testing.T, user, extra string) string {
	t.Helper()
	q := url.Values{}
	q.Set("password_file", s.passwordFile(t, user+"-pw"))
	q.Set("ca_file", s.ca.File)
	q.Set("cert_file", s.cert.CertFile)
	q.Set("key_file", s.cert.KeyFile)
	u := "rediss://" + user + "@" + s.srv.Addr() + "/?" + q.Encode()
	if extra != "" {
		u += "&" + extra
	}
	return u
}

// openLogged opens rawURL with a logger that writes to the returned buffer.
func openLogged(t *testing.T, rawURL string, opts ...distlock.Option) (distlock.Locker, *syncBuffer) {
	t.Helper()
	var logs syncBuffer
	l, err := distlock.Open(t.Context(), rawURL, append(opts, distlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, &logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// prompt bounds how long a refusal may take: an answer, not a timeout.
const prompt = 2 * time.Second

// A Redis with TLS (client certificates required) and an ACL file, reached
// by URL: one server for every case, which run in sequence.
func TestSecured(t *testing.T) {
	s := newSecured(t)

	// The whole suite holds for a client that has only the documented
	// privileges, opened by URL over TLS with a password from a file.
	t.Run("ConformanceByURL", func(t *testing.T) {
		raw := s.url(t, userApp, "prefix="+s.prefix+"conf:")
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		opener, _ := driver.Lookup(u.Scheme)
		conformance.Run(t, conformance.Harness{
			NewBackend: func(ctx context.Context) (driver.Backend, error) { return opener(ctx, u, nil) },
			ForceExpire: func(ctx context.Context, key string) error {
				n, err := s.admin.Del(ctx, redisnode.KeysFor(s.prefix+"conf:", key).Lock).Result()
				if err == nil && n != 1 {
					err = fmt.Errorf("key %q is not held", key)
				}
				return err
			},
			TTL:        500 * time.Millisecond,
			Contenders: 4, Rounds: 10,
		})
	})

	// TLS is asked for by rediss://, by tls=true, or by WithTLSConfig.
	t.Run("URLForms", func(t *testing.T) {
		tlsCfg := &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{s.cert.TLS}, MinVersion: tls.VersionTLS12}
		for name, tc := range map[string]struct {
			url  string
			opts []distlock.Option
		}{
			"tls=true": {strings.Replace(s.url(t, userApp, "tls=true&server_name=localhost"), "rediss://", "redis://", 1), nil},
			"WithTLSConfig": {"redis://" + userApp + "@" + s.srv.Addr() + "?password_file=" + url.QueryEscape(s.passwordFile(t, userApp+"-pw")),
				[]distlock.Option{distlock.WithTLSConfig(tlsCfg)}},
			"password in the URL": {"rediss://" + userApp + ":" + userApp + "-pw@" + s.srv.Addr() +
				"?ca_file=" + url.QueryEscape(s.ca.File) + "&cert_file=" + url.QueryEscape(s.cert.CertFile) + "&key_file=" + url.QueryEscape(s.cert.KeyFile), nil},
		} {
			t.Run(name, func(t *testing.T) {
				l, _ := openLogged(t, tc.url+"&prefix="+s.prefix+"forms:", tc.opts...)
				ls, err := l.TryAcquire(t.Context(), name)
				if err != nil {
					t.Fatal(err)
				}
				if err := ls.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		}
	})

	// A wrong password, a missing or untrusted certificate: ErrAccessDenied
	// at once, naming the cause, never ErrUnavailable, never the password.
	t.Run("RefusedAtOpen", func(t *testing.T) {
		other := testserver.NewCA(t)
		for name, tc := range map[string]struct {
			url, cause string
		}{
			"wrong password": {"rediss://" + userApp + ":not-the-pw@" + s.srv.Addr() + "?ca_file=" + url.QueryEscape(s.ca.File) +
				"&cert_file=" + url.QueryEscape(s.cert.CertFile) + "&key_file=" + url.QueryEscape(s.cert.KeyFile), "WRONGPASS"},
			"no client certificate": {"rediss://" + userApp + ":not-the-pw@" + s.srv.Addr() + "?ca_file=" + url.QueryEscape(s.ca.File),
				"TLS: the server refused the handshake"},
			"untrusted server": {"rediss://" + userApp + ":not-the-pw@" + s.srv.Addr() + "?ca_file=" + url.QueryEscape(other.File) +
				"&cert_file=" + url.QueryEscape(s.cert.CertFile) + "&key_file=" + url.QueryEscape(s.cert.KeyFile), "TLS: the server's certificate is not trusted"},
		} {
			t.Run(name, func(t *testing.T) {
				start := time.Now()
				l, err := distlock.Open(t.Context(), tc.url+"&dial_timeout=5s")
				if err == nil {
					_ = l.Close()
					t.Fatal("Open succeeded")
				}
				if d := time.Since(start); d > prompt {
					t.Errorf("refused after %v", d)
				}
				if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
					t.Errorf("%v: want ErrAccessDenied, not ErrUnavailable", err)
				}
				if !strings.Contains(err.Error(), tc.cause) {
					t.Errorf("%v: does not say %q", err, tc.cause)
				}
				if strings.Contains(err.Error(), "not-the-pw") {
					t.Errorf("%v: shows the password", err)
				}
			})
		}
	})

	// A TLS client that reached a port not speaking TLS (redis-server
	// answers nothing to a ClientHello) is told it may be one.
	t.Run("TLSToAPlainPort", func(t *testing.T) {
		plain := testserver.Redis(t)
		l, err := distlock.Open(t.Context(), "rediss://"+plain.Addr()+"?skip_verify=true&dial_timeout=500ms")
		if err == nil {
			_ = l.Close()
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "plain-text port") {
			t.Errorf("%v: want ErrUnavailable saying the port may not speak TLS", err)
		}
	})

	// A command or key the ACL does not grant: ErrAccessDenied, and a
	// waiting Acquire returns it at once instead of retrying to its ctx.
	t.Run("NoPermission", func(t *testing.T) {
		for name, raw := range map[string]string{
			"no EVAL":            s.url(t, userNoEval, "prefix="+s.prefix),
			"key outside ~sec:*": s.url(t, userApp, "prefix=other:"),
		} {
			t.Run(name, func(t *testing.T) {
				l, _ := openLogged(t, raw)
				if _, err := l.TryAcquire(t.Context(), "noperm"); !errors.Is(err, distlock.ErrAccessDenied) {
					t.Errorf("TryAcquire: %v, want ErrAccessDenied", err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				start := time.Now()
				_, err := l.Acquire(ctx, "noperm")
				if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
					t.Errorf("Acquire: %v, want ErrAccessDenied, not ErrUnavailable", err)
				}
				if d := time.Since(start); d > prompt {
					t.Errorf("Acquire returned after %v: retried a refusal", d)
				}
			})
		}
	})

	// Without PUBLISH the release still frees the lock and succeeds: the
	// notice is best effort.
	t.Run("PublishDenied", func(t *testing.T) {
		l, logs := openLogged(t, s.url(t, userNoPub, "prefix="+s.prefix+"nopub:"))
		ctx := t.Context()
		ls, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if errors.Is(ls.Err(), distlock.ErrLeaseLost) {
			t.Errorf("released lease reports %v", ls.Err())
		}
		if n, err := s.admin.Exists(ctx, redisnode.KeysFor(s.prefix+"nopub:", "k").Lock).Result(); err != nil || n != 0 {
			t.Errorf("lock key after Release: exists=%d, %v", n, err)
		}
		ran := false
		if err := l.Do(ctx, "k", func(context.Context, *distlock.Lease) error { ran = true; return nil }); err != nil || !ran {
			t.Errorf("Do: ran=%v, %v", ran, err)
		}
		if strings.Contains(logs.String(), "lost") {
			t.Errorf("a lease was logged lost:\n%s", logs)
		}
	})

	// Without SUBSCRIBE waiters poll, and the refusal is logged once.
	t.Run("SubscribeDenied", func(t *testing.T) {
		l, logs := openLogged(t, s.url(t, userNoSub, "prefix="+s.prefix+"nosub:&eviction=ignore"))
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		for range 2 {
			ls, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(200*time.Millisecond, func() { _ = ls.Release(context.Background()) })
			w, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// go-redis's own lines (from=go-redis) reach every Open's logger.
		if n := strings.Count(logs.String(), "level=WARN msg=\"distlock"); n != 1 || !strings.Contains(logs.String(), "refuses release notices") {
			t.Errorf("%d warnings, want one, of the refused notices:\n%s", n, logs)
		}
	})
}

// The documented ACL line is the one TestSecured proves.
func TestSecurityDocGivesTheProvenACL(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "security-redis.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ACL SETUSER app on >PASSWORD " + testserver.RedisLockACL(redis.DefaultPrefix)
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/security-redis.md does not give the ACL the tests prove:\n%s", want)
	}
}
