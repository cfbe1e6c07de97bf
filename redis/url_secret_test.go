package redis_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// advPasswords are real passwords of ACL users of the server below, each
// with a character that must be percent-encoded in a URL's userinfo ('/',
// '#', '?', a digits-only head before '/'). Each is made of marker pieces
// ("PWa1", "PWb2", …) that must appear in no error. Generated secrets
// (base64, openssl rand) hold '/' routinely.
var advPasswords = map[string]string{
	"slash": "PWa1/PWb2",
	"hash":  "PWc3#PWd4",
	"qmark": "PWe5?PWf6",
	"digit": "4242/PWg7",
}

// advPieces are the marker pieces of the passwords.
var advPieces = []string{"PWa1", "PWb2", "PWc3", "PWd4", "PWe5", "PWf6", "PWg7"}

// A credentialed URL whose password holds '/', '#' or '?' without
// percent-encoding is malformed; docs/security.md: "Errors name URLs with
// their password redacted, malformed URLs included": no piece of the
// password in Open's error (url.Parse's "invalid port" quotes one, and so
// does go-redis's "invalid database number").
func TestMalformedURLErrorHidesPassword(t *testing.T) {
	ca := testserver.NewCA(t)
	acl := []string{"user default off"}
	for user, pw := range advPasswords {
		acl = append(acl, "user "+user+" on >"+pw+" "+testserver.RedisLockACL("adv:"))
	}
	srv := testserver.Redis(t, testserver.WithRedisTLS(ca), testserver.WithRedisACL(acl...))
	cert := ca.Client(t, "app")
	q := "?ca_file=" + url.QueryEscape(ca.File) + "&cert_file=" + url.QueryEscape(cert.CertFile) +
		"&key_file=" + url.QueryEscape(cert.KeyFile) + "&prefix=adv:"

	for user, pw := range advPasswords {
		t.Run(user, func(t *testing.T) {
			// Percent-encoded, the password is accepted: it is the real one.
			good := "rediss://" + url.UserPassword(user, pw).String() + "@" + srv.Addr() + "/" + q
			l, err := distlock.Open(t.Context(), good)
			if err != nil {
				t.Fatalf("the encoded URL does not open: %v", err)
			}
			_ = l.Close()

			raw := "rediss://" + user + ":" + pw + "@" + srv.Addr() + "/" + q
			l, err = distlock.Open(t.Context(), raw)
			if err == nil {
				_ = l.Close()
				t.Skip("the unencoded URL opened")
			}
			if !errors.Is(err, distlock.ErrInvalidURL) {
				t.Logf("not ErrInvalidURL: %v", err)
			}
			for _, p := range advPieces {
				if strings.Contains(pw, p) && strings.Contains(err.Error(), p) {
					t.Errorf("Open(%s…) error shows password piece %q:\n%v", raw[:len("rediss://")+len(user)+1], p, err)
				}
			}
		})
	}
}
