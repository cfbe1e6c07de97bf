package etcd

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

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TLS, authentication and least privilege: servers with --client-cert-auth
// and auth on, and clients whose roles hold only the documented rights.

// testPassword is the password of the user "pw"; no error may show it.
const testPassword = "s3cret-Pw0rd"

// secured is an etcd server serving TLS to clients with certificates from
// ca, with auth on and these users: root; locker, revoked and pw (its
// password testPassword), whose roles may read and write distlock/ (the
// documented role of the default prefix); billing, whose role may read
// and write distlock-billing/ only. All but pw log in by their client
// certificate's CN; certs holds a certificate for each, and for nobody,
// a CN no user has.
type secured struct {
	ca    *testserver.CA
	certs map[string]testserver.KeyPair
	addr  string
	admin *clientv3.Client // root, by its certificate
}

func newSecured(t *testing.T) *secured {
	t.Helper()
	ca := testserver.NewCA(t)
	own := []string{DefaultPrefix + "/"}
	srv := testserver.Etcd(t, testserver.WithEtcdTLS(ca, ca.Server(t, "etcd")),
		testserver.WithEtcdAuth("", // root logs in by certificate only
			testserver.EtcdUser{Name: "locker", Prefixes: own},
			testserver.EtcdUser{Name: "revoked", Prefixes: own},
			testserver.EtcdUser{Name: "pw", Password: testPassword, Prefixes: own},
			testserver.EtcdUser{Name: "billing", Prefixes: []string{"distlock-billing/"}}))
	s := &secured{ca: ca, certs: map[string]testserver.KeyPair{}, addr: srv.Addr()}
	for _, cn := range []string{"root", "locker", "revoked", "billing", "nobody"} {
		s.certs[cn] = ca.Client(t, cn)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, Logger: zap.NewNop(), DialTimeout: 5 * time.Second,
		TLS: s.tls("root")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s.admin = cli
	return s
}

// tls is a client configuration that trusts the server and presents the
// certificate of cn.
func (s *secured) tls(cn string) *tls.Config {
	return &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{s.certs[cn].TLS}}
}

// url is an etcds:// URL to s that trusts ca and presents the certificate
// of cn (none if cn is ""), with more query parameters.
func (s *secured) url(userinfo string, ca *testserver.CA, cn string, more ...string) string {
	q := url.Values{"ca_file": {ca.File}}
	if cn != "" {
		q.Set("cert_file", s.certs[cn].CertFile)
		q.Set("key_file", s.certs[cn].KeyFile)
	}
	for i := 0; i+1 < len(more); i += 2 {
		q.Set(more[i], more[i+1])
	}
	return "etcds://" + userinfo + s.addr + "/?" + q.Encode()
}

// One secured server serves every rule below (a server start costs more
// than most of them). Revocation goes last: it changes a role. Parallel
// with the plain TestConformance: both mostly wait out TTLs, and together
// they take about as long as one.
func TestSecured(t *testing.T) {
	t.Parallel()
	s := newSecured(t)
	t.Run("ConformanceByURLOverMutualTLSWithLeastPrivilege", s.conformanceByURL)
	t.Run("RoleOnThePrefixRangeSuffices", s.roleOnThePrefixRangeSuffices)
	t.Run("OpenRefusedIsAccessDeniedAtOnce", s.openRefusedIsAccessDenied)
	t.Run("PlainURLToTLSServerSaysTLS", s.plainURLToTLSServerSaysTLS)
	t.Run("CallsAccessDeniedOnceRoleRevoked", s.callsAccessDeniedOnceRoleRevoked)
}

// The conformance suite, every Locker opened by an etcds:// URL over
// mutual TLS as a user whose role may read and write distlock/ and nothing
// else. Fewer contenders than the plain run: exclusion is the server's and
// the plain run's; this run is about every call the suite makes being
// allowed.
func (s *secured) conformanceByURL(t *testing.T) {
	u, err := url.Parse(s.url("", s.ca, "locker"))
	if err != nil {
		t.Fatal(err)
	}
	h := harnessOn(s.admin, func(ctx context.Context) (*backend, error) {
		b, err := open(ctx, u, nil)
		if err != nil {
			return nil, err
		}
		return b.(*backend), nil
	}, true)
	h.Contenders, h.Rounds = 4, 10
	conformance.Run(t, h)
}

// A role with read and write on exactly the Locker's range, prefix/, is
// all Open and every call need (not the key "distlock" itself), by
// certificate or by password, in every URL form.
func (s *secured) roleOnThePrefixRangeSuffices(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(testPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	locker := s.certs["locker"]
	for _, tc := range []struct {
		name string
		url  string
		opts []distlock.Option
	}{
		{"certificate", s.url("", s.ca, "locker"), nil},
		{"etcd:// with tls=true", "etcd://" + s.addr + "/?tls=true&ca_file=" + url.QueryEscape(s.ca.File) +
			"&cert_file=" + url.QueryEscape(locker.CertFile) + "&key_file=" + url.QueryEscape(locker.KeyFile), nil},
		{"certificate, prefix of its own", s.url("", s.ca, "billing", "prefix", "distlock-billing"), nil},
		{"server_name in the certificate", s.url("", s.ca, "locker", "server_name", "localhost"), nil},
		{"password", s.url("pw:"+testPassword+"@", s.ca, "nobody"), nil},
		{"password_file", s.url("pw@", s.ca, "nobody", "password_file", pwFile), nil},
		{"WithTLSConfig", "etcd://" + s.addr + "/", []distlock.Option{distlock.WithTLSConfig(s.tls("locker"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := distlock.Open(ctx, tc.url, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ls, err := l.Acquire(ctx, "k", distlock.WithValue("v"))
			if err != nil {
				t.Fatal(err)
			}
			if h, err := l.Inspect(ctx, "k"); err != nil || !h.Held || h.Value != "v" {
				t.Fatalf("Inspect = %+v, %v", h, err)
			}
			if err := ls.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A refusal — of the client's certificate, of the server's, of a password
// or of a permission — fails Open with ErrAccessDenied, at once (well
// within the dial timeout) and naming the address and its cause, never a
// secret.
func (s *secured) openRefusedIsAccessDenied(t *testing.T) {
	other := testserver.NewCA(t)
	stranger := other.Client(t, "locker")
	for _, tc := range []struct {
		name, url, cause string
	}{
		{"client certificate from another CA",
			s.url("", s.ca, "", "cert_file", stranger.CertFile, "key_file", stranger.KeyFile), "remote error: tls"},
		{"no client certificate", s.url("", s.ca, ""), "remote error: tls"},
		{"server certificate from another CA", s.url("", other, "locker"), "x509"},
		{"etcds:// alone trusts the system's CAs", "etcds://" + s.addr + "/?", "x509"},
		{"server name not in its certificate", s.url("", s.ca, "locker", "server_name", "elsewhere.example"), "x509"},
		{"wrong password", s.url("pw:not-"+testPassword+"@", s.ca, "nobody"), "authentication failed"},
		{"certificate of no user", s.url("", s.ca, "nobody"), "permission denied"},
		{"role on another prefix", s.url("", s.ca, "billing"), "permission denied"},
		{"prefix that only starts like the role's", s.url("", s.ca, "locker", "prefix", "distlock-billing"), "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const dial = 3 * time.Second
			start := time.Now()
			l, err := distlock.Open(context.Background(), tc.url+"&dial_timeout="+dial.String())
			took := time.Since(start)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, distlock.ErrAccessDenied) || errors.Is(err, distlock.ErrUnavailable) {
				t.Fatalf("want ErrAccessDenied (not ErrUnavailable), got %v", err)
			}
			if !strings.Contains(err.Error(), tc.cause) || !strings.Contains(err.Error(), s.addr) {
				t.Errorf("error does not name the address and %q: %v", tc.cause, err)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error shows the password: %v", err)
			}
			if took > dial/2 {
				t.Errorf("Open took %v (dial timeout %v)", took, dial)
			}
		})
	}
}

// A URL without TLS to a server that speaks only TLS fails Open within
// the dial timeout and says the server speaks TLS (the etcd client alone
// says only "deadline exceeded").
func (s *secured) plainURLToTLSServerSaysTLS(t *testing.T) {
	const dial = time.Second
	start := time.Now()
	l, err := distlock.Open(context.Background(), "etcd://"+s.addr+"/?dial_timeout="+dial.String())
	took := time.Since(start)
	if err == nil {
		l.Close()
		t.Fatal("Open succeeded")
	}
	if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "speaks TLS") {
		t.Fatalf("want ErrUnavailable saying the server speaks TLS, got %v", err)
	}
	if took > dial+time.Second {
		t.Errorf("Open took %v (dial timeout %v)", took, dial)
	}
}

// A permission lost after Open makes every call fail with ErrAccessDenied
// at once: an answer, which a waiting Acquire does not retry.
func (s *secured) callsAccessDeniedOnceRoleRevoked(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	l, err := distlock.Open(ctx, s.url("", s.ca, "revoked"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := l.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.RoleRevokePermission(ctx, "revoked", DefaultPrefix+"/", clientv3.GetPrefixRangeEnd(DefaultPrefix+"/")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func(context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k"); return err }},
		{"Acquire", func(ctx context.Context) error { _, err := l.Acquire(ctx, "k"); return err }},
		{"Inspect", func(ctx context.Context) error { _, err := l.Inspect(ctx, "held"); return err }},
		{"Refresh", func(ctx context.Context) error { return held.Refresh(ctx) }},
		{"Release", func(ctx context.Context) error { return held.Release(ctx) }},
	} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		err := c.call(cctx)
		cancel()
		if !errors.Is(err, distlock.ErrAccessDenied) {
			t.Errorf("%s: want ErrAccessDenied, got %v", c.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s returned after %v", c.name, d)
		}
	}
}
