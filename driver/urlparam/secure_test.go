package urlparam_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
	"github.com/distlock/distlock/internal/testserver"
)

const secret = "s3cr3t-Pa55"

// Redact keeps the password out of every shape of URL a user may write,
// well-formed or not.
func TestRedactHidesThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://:" + secret + "@h:6379/0",
		"redis://user:" + secret + "@h:6379/0",
		"rediss://user:" + secret + "@h:6380?ca_file=/ca.pem",
		"redlock://u:" + secret + "@h1:1,h2:2,h3:3",
		"redlock://u:" + secret + "@[::1]:1,h2:2,h3:3", // url.Parse refuses it
		"etcd://root:" + secret + "@h:2379/?prefix=x",
		"zk://alice:" + secret + "@h:2181/locks",
		"postgres://app:" + secret + "@db:5432/x?sslmode=verify-full",
		"redis://u:" + secret + "@h:bad",
		"redis://u:" + secret + "@h:6379/%zz",
		"redis://u:" + secret + "@h :6379",
		"redis://u:" + secret + "@h:6379?password=" + secret,
		"redis://h:6379?password=" + secret,
		"etcd://h:2379?token=" + secret,
		"redis://u:" + secret + "@",
		"redis://u:" + secret + "@/db",
		"redis://u:" + secret + "@h\x7f:1",
		"unknown://u:" + secret + "@h",
		"redis://u:p@ss:" + secret + "@h:6379",
		"redis://u%3A:" + secret + "@h:6379",
		"zk://u:" + secret + "@h1:1,h2:2/base?session_timeout=10s",
		"redis://u:" + secret + "@h:6379#frag",
	} {
		got := urlparam.Redact(raw)
		if strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q: the password shows", raw, got)
		}
		if !strings.Contains(got, "://") {
			t.Errorf("Redact(%q) = %q: not a URL any more", raw, got)
		}
	}
	if got := urlparam.Redact("redis://h:6379?password_file=/run/secrets/p"); !strings.Contains(got, "/run/secrets/p") {
		t.Errorf("a password_file's path is no secret: %q", got)
	}
}

// The TLS parameters make a config that trusts the CA file, presents the
// client certificate and verifies the server name; bad files are
// ErrInvalidURL naming the file.
func TestTLSParamsBuildAConfig(t *testing.T) {
	ca := testserver.NewCA(t)
	cli := ca.Client(t, "alice")
	read := func(raw string, on bool) (urlparam.TLSParams, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		q := urlparam.NewQuery(u)
		p := urlparam.ReadTLS(q, on, nil)
		return p, q.Done()
	}
	p, err := read("x://h?ca_file="+ca.File+"&cert_file="+cli.CertFile+"&key_file="+cli.KeyFile+"&server_name=svc", false)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := p.Config("h")
	if err != nil || cfg == nil {
		t.Fatalf("Config: %v, %v", cfg, err)
	}
	if cfg.ServerName != "svc" || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify {
		t.Fatalf("config %+v", cfg)
	}
	if p, _ := read("x://h", false); p.On {
		t.Fatal("TLS on without a parameter")
	}
	if p, _ := read("x://h", true); !p.On {
		t.Fatal("a TLS scheme did not turn TLS on")
	}
	if p, _ := read("x://h?tls=true", false); !p.On {
		t.Fatal("tls=true did not turn TLS on")
	}
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for _, raw := range []string{"x://h?ca_file=" + missing, "x://h?cert_file=" + cli.CertFile, "x://h?ca_file=" + cli.KeyFile} {
		p, err := read(raw, false)
		if err == nil {
			_, err = p.Config("h")
		}
		if !errors.Is(err, driver.ErrInvalidURL) {
			t.Errorf("%s: %v, want ErrInvalidURL", raw, err)
		}
	}
}

// password_file reads the password from a file, without its newline; a
// password in the URL as well is an error.
func TestCredentialsFromPasswordFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p")
	if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := func(raw string) (string, string, error) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return urlparam.Credentials(urlparam.NewQuery(u), u)
	}
	if u, p, err := creds("x://alice@h?password_file=" + f); err != nil || u != "alice" || p != secret {
		t.Fatalf("= %q, %q, %v", u, p, err)
	}
	if _, _, err := creds("x://alice:pw@h?password_file=" + f); !errors.Is(err, driver.ErrInvalidURL) {
		t.Fatalf("both: %v, want ErrInvalidURL", err)
	}
	if _, _, err := creds("x://alice@h?password_file=" + f + "x"); !errors.Is(err, driver.ErrInvalidURL) || strings.Contains(err.Error(), secret) {
		t.Fatalf("a missing file: %v", err)
	}
}

// An "@" that url.Parse left in the path marks a password whose "/" was not
// percent-encoded; a path's own "@", encoded as %40, does not.
func TestMisreadUserinfo(t *testing.T) {
	for raw, want := range map[string]bool{
		"redis://u:pw@h:1/0":       false,
		"zk://h:2181/locks%40team": false,
		"zk://h:2181/locks@team":   true,
		"redis://u:4242/pw@h:1/":   true,
		"u:pw@h:1":                 true,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := urlparam.MisreadUserinfo(u); got != want {
			t.Errorf("MisreadUserinfo(%q) = %v, want %v", raw, got, want)
		}
	}
}
