package redlock_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// advNodes are three Redis nodes with TLS (client certificates required)
// and an ACL file whose users have passwords that need percent-encoding.
type advNodes struct {
	hosts []string
	ca    *testserver.CA
	cert  testserver.KeyPair
}

var advPasswords = map[string]string{
	"app":   "app-pw",
	"slash": "PWa1/PWb2",
	"digit": "4242/PWg7",
}

func newAdvNodes(t *testing.T) *advNodes {
	t.Helper()
	ca := testserver.NewCA(t)
	acl := []string{"user default off"}
	for user, pw := range advPasswords {
		acl = append(acl, "user "+user+" on >"+pw+" "+testserver.RedisLockACL("adv:"))
	}
	srvs := testserver.RedisN(t, 3, testserver.WithRedisTLS(ca), testserver.WithRedisACL(acl...))
	n := &advNodes{ca: ca, cert: ca.Client(t, "app")}
	for _, s := range srvs {
		n.hosts = append(n.hosts, s.Addr())
	}
	return n
}

// url is a redlock:// URL with userinfo (as given, not encoded) and the
// CA and client certificate; tls=true unless plain.
func (n *advNodes) url(userinfo string, plain bool) string {
	q := url.Values{"ca_file": {n.ca.File}, "cert_file": {n.cert.CertFile}, "key_file": {n.cert.KeyFile}, "prefix": {"adv:"}}
	if plain {
		q = url.Values{"prefix": {"adv:"}}
	} else {
		q.Set("tls", "true")
	}
	return "redlock://" + userinfo + "@" + strings.Join(n.hosts, ",") + "/?" + q.Encode()
}

// docs/security.md: "Errors name URLs with their password redacted,
// malformed URLs included". A Redlock URL whose password holds a '/' not
// percent-encoded must not show in Open's error, whole or in pieces.
func TestMalformedURLErrorHidesPassword(t *testing.T) {
	n := newAdvNodes(t)
	for _, tc := range []struct{ user, leak string }{{"slash", "PWb2"}, {"digit", "PWg7"}} {
		t.Run(tc.user, func(t *testing.T) {
			pw := advPasswords[tc.user]
			l, err := distlock.Open(t.Context(), n.url(url.UserPassword(tc.user, pw).String(), false))
			if err != nil {
				t.Fatalf("the encoded URL does not open: %v", err)
			}
			_ = l.Close()
			l, err = distlock.Open(t.Context(), n.url(tc.user+":"+pw, false))
			if err == nil {
				_ = l.Close()
				t.Skip("the unencoded URL opened")
			}
			if strings.Contains(err.Error(), tc.leak) {
				t.Errorf("Open's error shows the password (%q):\n%v", pw, err)
			}
		})
	}
}
