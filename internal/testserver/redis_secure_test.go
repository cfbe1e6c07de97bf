package testserver

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A Redis started with TLS and an ACL file speaks TLS only, to clients
// with a certificate of the CA, and lets in only the users of the file.
func TestRedisWithTLSAndACL(t *testing.T) {
	ca := NewCA(t)
	s := Redis(t, WithRedisTLS(ca), WithRedisACL(
		"user default off",
		"user admin on >admin-pw ~* &* +@all",
	))
	cli := ca.Client(t, "app")
	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cli.TLS}, ServerName: "127.0.0.1"}
	ping := func(o *redis.Options) error {
		o.Addr, o.ContextTimeoutEnabled, o.MaxRetries = s.Addr(), true, -1
		c := redis.NewClient(o)
		defer c.Close()
		return c.Ping(ctxWithin(t, generous)).Err()
	}
	if err := ping(&redis.Options{Username: "admin", Password: "admin-pw", TLSConfig: withCert}); err != nil {
		t.Fatalf("admin over TLS with a certificate: %v", err)
	}
	if err := ping(&redis.Options{TLSConfig: withCert}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no user: %v, want NOAUTH", err)
	}
	if err := ping(&redis.Options{Username: "admin", Password: "admin-pw"}); err == nil {
		t.Error("plain text: PING answered")
	}
	noCert := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if err := ping(&redis.Options{Username: "admin", Password: "admin-pw", TLSConfig: noCert}); err == nil {
		t.Error("TLS without a client certificate: PING answered")
	}
}
