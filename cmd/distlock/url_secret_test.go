package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
)

// docs/security.md: "the CLI's logs and reports carry no credentials";
// "Errors name URLs with their password redacted, malformed URLs
// included": `distlock run --url` with a password holding a '/' that is
// not percent-encoded must not print it on stderr.
func TestRunMalformedURLHidesPassword(t *testing.T) {
	const pw = "PWa1/PWb2"
	srv := testserver.Redis(t, testserver.WithRedisACL("user default off",
		"user slash on >"+pw+" "+testserver.RedisLockACL("distlock:")))
	good := runCLI(t, "run", "--url", "redis://"+url.UserPassword("slash", pw).String()+"@"+srv.Addr()+"/?eviction=ignore",
		"--key", "k", "--", "true")
	if good.code != 0 {
		t.Fatalf("the encoded URL: exit %d, stderr:\n%s", good.code, good.stderr)
	}
	r := runCLI(t, "run", "--url", "redis://slash:"+pw+"@"+srv.Addr()+"/?eviction=ignore", "--key", "k", "--", "true")
	t.Logf("exit %d, stderr: %s", r.code, r.stderr)
	if strings.Contains(r.stderr, "PWb2") || strings.Contains(r.stderr, "PWa1") {
		t.Errorf("distlock run printed (part of) the password %q:\n%s", pw, r.stderr)
	}
}

// bench names a URL that failed to open without its password: neither a
// malformed URL's nor a password query parameter.
func TestBenchURLErrorHidesPassword(t *testing.T) {
	const pw = "PWa1/PWb2"
	srv := testserver.Redis(t, testserver.WithRedisACL("user default off",
		"user slash on >"+pw+" "+testserver.RedisLockACL("distlock:")))
	for name, tc := range map[string]struct{ url, secret string }{
		"slash in the password": {"redis://slash:" + pw + "@" + srv.Addr() + "/0?eviction=ignore", "PWb2"},
		"password parameter":    {"redis://" + srv.Addr() + "/0?eviction=ignore&password=PWh8", "PWh8"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runCLI(t, "bench", "-q", "--url", tc.url, "--measure", "uncontended", "--duration", "50ms", "--repeat", "1",
				"--json", t.TempDir()+"/r.json")
			t.Logf("exit %d, stderr: %s", r.code, r.stderr)
			if r.code == 0 {
				t.Skip("bench succeeded")
			}
			if strings.Contains(r.stderr, tc.secret) || strings.Contains(r.stdout, tc.secret) {
				t.Errorf("distlock bench printed the secret %q:\n%s", tc.secret, r.stderr)
			}
		})
	}
}
