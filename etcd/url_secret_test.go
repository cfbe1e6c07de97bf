package etcd

import (
	"net/url"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// docs/security-etcd.md: "Errors and logs never show the password";
// docs/security.md: "Errors name URLs with their password redacted,
// malformed URLs included". A password holding a '/' that is not
// percent-encoded (generated secrets often hold one) must not show in
// Open's error, whole or in pieces.
func TestMalformedURLErrorHidesPassword(t *testing.T) {
	ca := testserver.NewCA(t)
	own := []string{DefaultPrefix + "/"}
	passwords := map[string]string{"slash": "PWa1/PWb2", "digit": "4242/PWg7"}
	srv := testserver.Etcd(t, testserver.WithEtcdTLS(ca, ca.Server(t, "etcd")),
		testserver.WithEtcdAuth("",
			testserver.EtcdUser{Name: "slash", Password: passwords["slash"], Prefixes: own},
			testserver.EtcdUser{Name: "digit", Password: passwords["digit"], Prefixes: own}))
	cert := ca.Client(t, "nobody")
	q := "/?" + url.Values{"ca_file": {ca.File}, "cert_file": {cert.CertFile}, "key_file": {cert.KeyFile}}.Encode()
	for _, tc := range []struct{ user, leak string }{{"slash", "PWb2"}, {"digit", "PWg7"}} {
		t.Run(tc.user, func(t *testing.T) {
			pw := passwords[tc.user]
			l, err := distlock.Open(t.Context(), "etcds://"+url.UserPassword(tc.user, pw).String()+"@"+srv.Addr()+q)
			if err != nil {
				t.Fatalf("the encoded URL does not open: %v", err)
			}
			_ = l.Close()
			l, err = distlock.Open(t.Context(), "etcds://"+tc.user+":"+pw+"@"+srv.Addr()+q)
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
