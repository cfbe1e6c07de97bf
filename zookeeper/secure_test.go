package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

const (
	alicePassword = "alice-s3cret"
	bobPassword   = "bob-s3cret"
	superPassword = "super-s3cret"
)

// secured is a ZooKeeper server as production runs one: a TLS port
// (Netty's secureClientPort) that wants a client certificate from the
// test CA, and digest users. The tests set up and inspect znodes as the
// super user, whom no ACL binds, on the plaintext port.
type secured struct {
	srv    *testserver.Server
	ca     *testserver.CA
	client testserver.KeyPair // a client certificate the server accepts
	super  *zk.Conn
	anon   *zk.Conn // no credentials at all
	bob    *zk.Conn // another digest user
}

// TestSecure shares one secured server among its subtests.
func TestSecure(t *testing.T) {
	ca := testserver.NewCA(t)
	srv := testserver.ZooKeeper(t, testserver.WithZKTLS(ca, ca.Server(t, "zookeeper")),
		testserver.WithZKSuperPassword(superPassword))
	s := &secured{srv: srv, ca: ca, client: ca.Client(t, "distlock"),
		super: authConn(t, srv.Addr(), "super:"+superPassword), anon: adminConn(t, srv.Addr()),
		bob: authConn(t, srv.Addr(), "bob:"+bobPassword)}

	t.Run("ConformanceByURL", func(t *testing.T) { testConformanceByURL(t, s) })
	t.Run("ZnodesCreatorOnly", func(t *testing.T) { testZnodesCreatorOnly(t, s) })
	t.Run("HijackRefused", func(t *testing.T) { testHijackRefused(t, s) })
	t.Run("OpenParentRefused", func(t *testing.T) { testOpenParentRefused(t, s) })
	t.Run("WrongCredentialsDenied", func(t *testing.T) { testWrongCredentials(t, s) })
	t.Run("NoAuthIsAccessDenied", func(t *testing.T) { testNoAuthIsAccessDenied(t, s) })
	t.Run("TLSRefusalNamed", func(t *testing.T) { testTLSRefusal(t, s) })
	t.Run("ConnOptionsCannotHangDial", func(t *testing.T) { testConnOptionsCannotHangDial(t, s) })
	t.Run("CertificateIdentityACL", func(t *testing.T) { testCertificateIdentityACL(t, s) })
	t.Run("IPOpenBaseRefused", func(t *testing.T) { testIPOpenBaseRefused(t, s) })
	t.Run("IPOpenKeyDirRefused", func(t *testing.T) { testIPOpenKeyDirRefused(t, s) })
	t.Run("OwnACLOpenByIPRefused", func(t *testing.T) { testOwnACLOpenByIPRefused(t, s) })
	t.Run("OtherUserParentsRefused", func(t *testing.T) { testOtherUserParentsRefused(t, s) })
	t.Run("RecreatedBaseRefused", func(t *testing.T) { testRecreatedBaseRefused(t, s) })
	t.Run("TypoCreatedBaseNamed", func(t *testing.T) { testTypoCreatedBaseNamed(t, s) })
	t.Run("TLSPortMismatchNamed", func(t *testing.T) { testTLSPortMismatchNamed(t, s) })
}

// TestURLUserNameNotEchoed checks that a zk:// user name holding a ':'
// (user:password percent-encoded as the user) is refused without the
// part after the ':', which may be the password. No server: it fails
// before dialling.
func TestURLUserNameNotEchoed(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"zk://alice%3A" + alicePassword + "@127.0.0.1:1/x?password_file=" + url.QueryEscape(pw),
		"zk://alice%3A" + alicePassword + ":x@127.0.0.1:1/x",
	} {
		_, err := distlock.Open(ctxFor(t, 5*time.Second), u)
		if !errors.Is(err, distlock.ErrInvalidURL) || strings.Contains(err.Error(), alicePassword) || !strings.Contains(err.Error(), "alice") {
			t.Errorf("Open with the user name alice:<password>: %v, want ErrInvalidURL naming alice alone", err)
		}
	}
}

// authConn is a plain client authenticated with digest "user:password".
func authConn(t *testing.T, addr, userPassword string) *zk.Conn {
	t.Helper()
	c := adminConn(t, addr)
	if err := c.AddAuth("digest", []byte(userPassword)); err != nil {
		t.Fatal(err)
	}
	return c
}

// url is a zk:// URL for addr, with userinfo ("user:password", or none)
// and the client certificate; extra are more query parameters as name,
// value pairs, an empty value removing the parameter.
func (s *secured) url(addr, userinfo, base string, extra ...string) string {
	q := url.Values{}
	q.Set("ca_file", s.ca.File)
	q.Set("cert_file", s.client.CertFile)
	q.Set("key_file", s.client.KeyFile)
	q.Set("session_timeout", sessionTimeout.String())
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			q.Del(extra[i])
		} else {
			q.Set(extra[i], extra[i+1])
		}
	}
	if userinfo != "" {
		userinfo += "@"
	}
	return "zk://" + userinfo + addr + base + "?" + q.Encode()
}

// open opens a Locker on the TLS port by URL, closed when t ends.
func (s *secured) open(t *testing.T, userinfo, base string, extra ...string) distlock.Locker {
	t.Helper()
	l, err := distlock.Open(ctxFor(t, 20*time.Second), s.url(s.srv.SecureAddr(), userinfo, base, extra...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// urlHarness runs the conformance suite on Lockers opened by URL over TLS
// with digest auth, in a base path provisioned with the least rights the
// docs list (alice: create, read, delete), each Locker through a raw relay
// (it cannot read TLS) that Crash cuts. ForceExpire deletes the holder's znode as the super user:
// the server ends the lock, which the holder's session outlives (a real
// session expiry is TestStandalone's; its relay reads the session's
// password off the wire, which TLS hides).
type urlHarness struct {
	t *testing.T
	s *secured

	mu     sync.Mutex
	relays map[driver.Backend]*relay
}

const confBase = "/least-privilege"

// urlTTL is the URL harness's session timeout and TTL: half the
// standalone harness's, to keep the second run of the suite short.
const urlTTL = time.Second

func testConformanceByURL(t *testing.T, s *secured) {
	if _, err := s.super.Create(confBase, nil, 0, zk.DigestACL(zk.PermCreate|zk.PermRead|zk.PermDelete, "alice", alicePassword)); err != nil {
		t.Fatal(err)
	}
	h := &urlHarness{t: t, s: s, relays: map[driver.Backend]*relay{}}
	conformance.Run(t, conformance.Harness{
		NewBackend:  h.newBackend,
		Crash:       h.crash,
		ForceExpire: h.forceExpire,
		TTL:         urlTTL,
	})
}

func (h *urlHarness) newBackend(ctx context.Context) (driver.Backend, error) {
	r := newRawRelay(h.t, h.s.srv.SecureAddr())
	u, err := url.Parse(h.s.url(r.addr(), "alice:"+alicePassword, confBase, "session_timeout", urlTTL.String()))
	if err != nil {
		return nil, err
	}
	opener, _ := driver.Lookup(u.Scheme)
	b, err := opener(ctx, u, nil)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.relays[b] = r
	h.mu.Unlock()
	return b, nil
}

func (h *urlHarness) crash(_ context.Context, b driver.Backend) error {
	return cutRelay(&h.mu, h.relays, b)
}

func (h *urlHarness) forceExpire(_ context.Context, key string) error {
	p, err := holderPath(h.s.super, confBase+"/"+escapeKey(key))
	if err != nil {
		return err
	}
	return h.s.super.Delete(p, -1)
}

// testZnodesCreatorOnly checks that with credentials every znode the
// Locker creates, from the base path's missing ancestors down to the lock
// znode, carries the user's digest ACL and nothing else; that the
// password can come from a file; and that Dial still reads the session
// timeout the server granted off the TLS connection.
func testZnodesCreatorOnly(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte(alicePassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := s.open(t, "alice", "/creator/only/locks", "password_file", pw)
	lease, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	var n Node
	lease.As(&n)
	want := zk.DigestACL(zk.PermAll, "alice", alicePassword)
	for _, p := range []string{"/creator", "/creator/only", "/creator/only/locks", path.Dir(n.Path), n.Path} {
		acl, _, err := s.super.GetACL(p)
		if err != nil {
			t.Fatalf("GetACL(%s): %v", p, err)
		}
		if !reflect.DeepEqual(acl, want) {
			t.Errorf("ACL of %s = %v, want alice's digest alone %v", p, acl, want)
		}
	}
	if g := backendOf(t, l).link.granted(); g != sessionTimeout {
		t.Errorf("granted session timeout seen through TLS = %v, want %v", g, sessionTimeout)
	}
}

// testHijackRefused has a client without credentials and one of another
// user try to end or jump alice's lock: delete her lock znode, queue a
// znode ahead of hers, open her key directory's or base path's ACL, plant
// an open key directory. Each is refused, and alice keeps her lock. The
// super user, whom ACLs do not bind, then deletes the znode to show that
// the same delete would have ended the lock; and without credentials any
// client can, as the package doc warns.
func testHijackRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/secure/hijack"
	holder := s.open(t, "alice:"+alicePassword, base)
	lease, err := holder.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var n Node
	lease.As(&n)
	dir := path.Dir(n.Path)
	for _, c := range []struct {
		who  string
		conn *zk.Conn
	}{{"a client without credentials", s.anon}, {"another digest user", s.bob}} {
		attempts := map[string]error{
			"delete the lock znode": c.conn.Delete(n.Path, -1),
			"open the key directory": func() error {
				_, err := c.conn.SetACL(dir, zk.WorldACL(zk.PermAll), -1)
				return err
			}(),
			"open the base path": func() error {
				_, err := c.conn.SetACL(base, zk.WorldACL(zk.PermAll), -1)
				return err
			}(),
			"queue ahead of the holder": func() error {
				_, err := c.conn.Create(dir+"/lock-00000000000000000000000000000000-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
				return err
			}(),
			"plant an open key directory": func() error {
				_, err := c.conn.Create(base+"/"+escapeKey("planted"), nil, 0, zk.WorldACL(zk.PermAll))
				return err
			}(),
		}
		for what, err := range attempts {
			if !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s tried to %s: %v, want %v", c.who, what, err, zk.ErrNoAuth)
			}
		}
	}
	if _, err := s.open(t, "alice:"+alicePassword, base).TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of alice's held key after the attempts: %v, want ErrNotAcquired", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("the holder's lease after the attempts: %v", err)
	}

	// The control: the delete itself works when the ACL allows it.
	if err := s.super.Delete(n.Path, -1); err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctx); !errors.Is(err, distlock.ErrLeaseLost) && !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh after the super user deleted the znode: %v, want the lease lost", err)
	}
	// Without credentials, any client may delete a lock.
	open, err := distlock.Open(ctx, "zk://"+s.srv.Addr()+"/secure-open?session_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	ol, err := open.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ol.As(&n)
	if err := s.bob.Delete(n.Path, -1); err != nil {
		t.Errorf("another user could not delete a lock made without credentials: %v", err)
	}
}

// testOpenParentRefused checks that a Locker with credentials refuses a
// base path or key directory anyone may write, before it queues there,
// unless allow_open_acl=true; and an open WithACL with credentials.
func testOpenParentRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	if _, err := s.super.Create("/open-base", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), "alice:"+alicePassword, "/open-base"))
	if !errors.Is(err, ErrOpenACL) || !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "/open-base") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open on a base path open to anyone: %v, want ErrOpenACL naming it", err)
	}
	if strings.Contains(err.Error(), alicePassword) {
		t.Errorf("the error holds the password: %v", err)
	}
	accepted := s.open(t, "alice:"+alicePassword, "/open-base", "allow_open_acl", "true")
	if lease, err := accepted.TryAcquire(ctx, "k"); err != nil {
		t.Errorf("TryAcquire with allow_open_acl=true: %v", err)
	} else {
		lease.Release(ctx)
	}

	// A key directory planted open in a creator-only base path.
	const base = "/secure/planted"
	l = s.open(t, "alice:"+alicePassword, base)
	dir := base + "/" + escapeKey("k")
	if _, err := s.super.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Acquire(ctx, "k"); !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Acquire in a key directory open to anyone: %v, want ErrOpenACL naming it", err)
	}
	if d := time.Since(start); d > ConnectTimeout {
		t.Errorf("the refusal took %v", d)
	}
	if c, _, err := s.super.Children(dir); err != nil || len(c) != 0 {
		t.Errorf("the refused acquire left %v (%v) in %s", c, err, dir)
	}

	_, err = Dial(ctx, []string{s.srv.Addr()}, WithAuth("digest", []byte("alice:"+alicePassword)), WithACL(zk.WorldACL(zk.PermAll)))
	if !errors.Is(err, ErrOpenACL) {
		t.Errorf("Dial with credentials and an ACL open to anyone: %v, want ErrOpenACL", err)
	}
}

// testWrongCredentials checks that a wrong password, another user and no
// credentials are refused as ErrAccessDenied at once (the server takes
// any digest as some identity: the base path's ACL is what refuses it),
// with no password in the error.
func testWrongCredentials(t *testing.T, s *secured) {
	ctx := ctxFor(t, 30*time.Second)
	const base = "/secure/credentials"
	s.open(t, "alice:"+alicePassword, base).Close() // alice's base path
	// One as an operator provisions it (alice: cdr, no admin, so that
	// alice reads the digests masked).
	const cdr = "/least-cdr"
	if _, err := s.super.Create(cdr, nil, 0, zk.DigestACL(zk.PermCreate|zk.PermRead|zk.PermDelete, "alice", alicePassword)); err != nil {
		t.Fatal(err)
	}
	s.open(t, "alice:"+alicePassword, cdr).Close()
	for _, c := range []struct{ name, userinfo, secret, base string }{
		{"wrong password", "alice:not-" + alicePassword, "not-" + alicePassword, base},
		{"another user", "bob:" + bobPassword, bobPassword, base},
		{"wrong password, cdr base path", "alice:not-" + alicePassword, "not-" + alicePassword, cdr},
	} {
		start := time.Now()
		l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), c.userinfo, c.base))
		if !errors.Is(err, distlock.ErrAccessDenied) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: Open = %v, want ErrAccessDenied", c.name, err)
			continue
		}
		if d := time.Since(start); d >= ConnectTimeout {
			t.Errorf("%s: refused after %v", c.name, d)
		}
		if strings.Contains(err.Error(), c.secret) {
			t.Errorf("%s: the error holds the password: %v", c.name, err)
		}
	}
	// No credentials: nothing to check at Open, but the first acquire is
	// refused, and a waiting Acquire does not retry it.
	anon := s.open(t, "", base)
	start := time.Now()
	if _, err := anon.Acquire(ctx, "k"); !errors.Is(err, distlock.ErrAccessDenied) {
		t.Errorf("Acquire without credentials: %v, want ErrAccessDenied", err)
	}
	if d := time.Since(start); d >= ConnectTimeout {
		t.Errorf("Acquire without credentials refused after %v", d)
	}
}

// testNoAuthIsAccessDenied checks that the server's NOAUTH on a create
// (a key directory of another user's) and on a delete (alice's own right
// to delete taken away while she holds) is ErrAccessDenied.
func testNoAuthIsAccessDenied(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/secure/noauth"
	l := s.open(t, "alice:"+alicePassword, base)
	if _, err := s.super.Create(base+"/"+escapeKey("bobs"), nil, 0, zk.DigestACL(zk.PermAll, "bob", bobPassword)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := l.Acquire(ctx, "bobs"); !errors.Is(err, distlock.ErrAccessDenied) {
		t.Errorf("Acquire in bob's key directory: %v, want ErrAccessDenied", err)
	}
	if d := time.Since(start); d >= ConnectTimeout {
		t.Errorf("refused after %v", d)
	}

	lease, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var n Node
	lease.As(&n)
	dir := path.Dir(n.Path)
	if _, err := s.super.SetACL(dir, zk.DigestACL(zk.PermAll&^zk.PermDelete, "alice", alicePassword), -1); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); !errors.Is(err, distlock.ErrAccessDenied) {
		t.Errorf("Release without the right to delete: %v, want ErrAccessDenied", err)
	}
	if ok, _, err := s.super.Exists(n.Path); err != nil || !ok {
		t.Errorf("the lock znode after the refused delete: exists=%v, %v", ok, err)
	}
	if _, err := s.super.SetACL(dir, zk.DigestACL(zk.PermAll, "alice", alicePassword), -1); err != nil {
		t.Fatal(err)
	}
}

// testTLSRefusal checks that a TLS handshake either side refuses is
// ErrAccessDenied naming its cause, at once rather than when Dial gives
// up waiting for a session.
func testTLSRefusal(t *testing.T, s *secured) {
	ctx := ctxFor(t, 30*time.Second)
	other := testserver.NewCA(t)
	stranger := other.Client(t, "stranger")
	for _, c := range []struct {
		name, want string
		params     []string
	}{
		{"server certificate from an unknown CA", "certificate signed by unknown authority", []string{"ca_file", other.File}},
		{"server name not in its certificate", "wrong.example", []string{"server_name", "wrong.example"}},
		{"no client certificate", "remote error", []string{"cert_file", "", "key_file", ""}},
		{"client certificate from an unknown CA", "remote error", []string{"cert_file", stranger.CertFile, "key_file", stranger.KeyFile}},
	} {
		start := time.Now()
		l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), "alice:"+alicePassword, "/secure/tls", c.params...))
		if !errors.Is(err, distlock.ErrAccessDenied) || !strings.Contains(err.Error(), c.want) {
			if l != nil {
				l.Close()
			}
			t.Errorf("%s: Open = %v, want ErrAccessDenied naming %q", c.name, err, c.want)
			continue
		}
		if d := time.Since(start); d >= ConnectTimeout {
			t.Errorf("%s: refused after %v", c.name, d)
		}
		if strings.Contains(err.Error(), alicePassword) {
			t.Errorf("%s: the error holds the password: %v", c.name, err)
		}
	}
}

// testConnOptionsCannotHangDial checks the two ways WithConnOptions could
// undo Dial: an AddAuth in it, which blocks zk.Connect for ever, ends Dial
// with its ctx; and a zk.WithDialer in it, which would replace the TLS
// dialer, is refused before any credential goes out.
func testConnOptionsCannotHangDial(t *testing.T, s *secured) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, []string{s.srv.Addr()}, WithConnOptions(func(c *zk.Conn) {
		_ = c.AddAuth("digest", []byte("alice:"+alicePassword))
	}))
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithAuth") {
		t.Errorf("Dial with AddAuth in WithConnOptions: %v, want ErrInvalidOption pointing to WithAuth", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Dial with AddAuth in WithConnOptions returned after %v, its ctx had 1s", d)
	}

	cfg := &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{s.client.TLS}}
	_, err = Dial(ctxFor(t, 10*time.Second), []string{s.srv.Addr()}, distlock.WithTLSConfig(cfg),
		WithAuth("digest", []byte("alice:"+alicePassword)), WithConnOptions(zk.WithDialer(net.DialTimeout)))
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("Dial with TLS and a dialer of its own: %v, want ErrInvalidOption", err)
	}
}

// testCertificateIdentityACL checks the recipe for a client known by its
// certificate alone: Dial over mutual TLS with an x509 ACL and no
// password. Its znodes are then its own.
func testCertificateIdentityACL(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	cfg := &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{s.client.TLS}}
	l, err := Dial(ctx, []string{s.srv.SecureAddr()}, distlock.WithTLSConfig(cfg), WithBasePath("/x509"),
		WithACL([]zk.ACL{{Scheme: "x509", ID: "CN=distlock", Perms: zk.PermAll}}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	var n Node
	lease.As(&n)
	for _, c := range []*zk.Conn{s.anon, s.bob} {
		if err := c.Delete(n.Path, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("a client without the certificate deleted the lock znode: %v", err)
		}
	}
}

// ipOpen lets every IPv4 client do anything: world:anyone in all but name.
var ipOpen = []zk.ACL{{Scheme: "ip", ID: "0.0.0.0/0", Perms: zk.PermAll}}

// testIPOpenBaseRefused checks that a base path open to every IP, as a
// client without credentials may create it before the app first starts,
// is ErrOpenACL like world:anyone.
func testIPOpenBaseRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/ip-open-base"
	if _, err := s.anon.Create(base, nil, 0, ipOpen); err != nil {
		t.Fatal(err)
	}
	l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), "alice:"+alicePassword, base))
	if !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), "ip:0.0.0.0/0") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open on a base path with ACL ip:0.0.0.0/0:cdrwa: %v, want ErrOpenACL naming the entry", err)
	}
}

// testIPOpenKeyDirRefused checks that a key directory open to every IP in
// a creator-only base path is ErrOpenACL, before the Locker queues there.
func testIPOpenKeyDirRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/secure/ip-open-dir"
	l := s.open(t, "alice:"+alicePassword, base)
	dir := base + "/" + escapeKey("k")
	if _, err := s.super.Create(dir, nil, 0, ipOpen); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), dir) {
		t.Errorf("TryAcquire in a key directory with ACL ip:0.0.0.0/0:cdrwa: %v, want ErrOpenACL naming it", err)
	}
	if c, _, err := s.super.Children(dir); err != nil || len(c) != 0 {
		t.Errorf("the refused acquire left %v (%v) in %s", c, err, dir)
	}
}

// testOwnACLOpenByIPRefused checks that credentials with a WithACL open to
// every IP are refused as one open to world:anyone is.
func testOwnACLOpenByIPRefused(t *testing.T, s *secured) {
	_, err := Dial(ctxFor(t, 10*time.Second), []string{s.srv.Addr()}, WithAuth("digest", []byte("alice:"+alicePassword)),
		WithBasePath("/own-ip"), WithACL(ipOpen))
	if !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), "ip:0.0.0.0/0") {
		t.Errorf("Dial with WithAuth and WithACL(ip:0.0.0.0/0:cdrwa): %v, want ErrOpenACL naming the entry", err)
	}
}

// testOtherUserParentsRefused checks that a base path another digest user
// may write, and a key directory another user planted granting alice's
// certificate subject and himself all, are ErrOpenACL: he could delete or
// jump alice's locks. The errors name the user, not the digest.
func testOtherUserParentsRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	bob := zk.DigestACL(zk.PermAll, "bob", bobPassword)
	// alice with admin reads bob's digest; with cdr, masked ("bob:x").
	for shared, alice := range map[string]int32{"/shared-alice-bob": zk.PermAll, "/shared-masked": zk.PermCreate | zk.PermRead | zk.PermDelete} {
		if _, err := s.super.Create(shared, nil, 0, append(zk.DigestACL(alice, "alice", alicePassword), bob...)); err != nil {
			t.Fatal(err)
		}
		l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), "alice:"+alicePassword, shared))
		if !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), "digest user bob") || strings.Contains(err.Error(), bob[0].ID) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open on a base path %s bob may write: %v, want ErrOpenACL naming bob alone", shared, err)
		}
	}

	const base = "/secure/bobs-dir"
	alice := s.open(t, "alice:"+alicePassword, base)
	if _, err := s.super.SetACL(base, append(zk.DigestACL(zk.PermAll, "alice", alicePassword), zk.DigestACL(zk.PermCreate, "bob", bobPassword)...), -1); err != nil {
		t.Fatal(err)
	}
	dir := base + "/" + escapeKey("k")
	bobACL := append(zk.DigestACL(zk.PermAll, "bob", bobPassword), zk.ACL{Scheme: "x509", ID: "CN=distlock", Perms: zk.PermAll})
	if _, err := s.bob.Create(dir, nil, 0, bobACL); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.TryAcquire(ctx, "k"); !errors.Is(err, ErrOpenACL) || !strings.Contains(err.Error(), dir) {
		t.Errorf("TryAcquire in a key directory bob planted: %v, want ErrOpenACL naming it", err)
	}
}

// testRecreatedBaseRefused replays a takeover under the default root ACL
// (world:anyone:cdrwa): alice's Locker made its base path creator-only,
// locked and released; once the key directory is gone (the container
// reaper's work, done here by the super user) a client without
// credentials deletes the empty base path, recreates it and the key
// directory open to every IP. Alice's next acquire must be ErrOpenACL,
// not a lock that client could delete.
func testRecreatedBaseRefused(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/root-race"
	l := s.open(t, "alice:"+alicePassword, base)
	lease, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	dir := base + "/" + escapeKey("k")
	if err := s.super.Delete(dir, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if err := s.anon.Delete(base, -1); err != nil {
		t.Fatalf("delete the empty base path without credentials: %v", err)
	}
	for _, p := range []string{base, dir} {
		if _, err := s.anon.Create(p, nil, 0, ipOpen); err != nil {
			t.Fatal(err)
		}
	}
	if lease, err := l.TryAcquire(ctx, "k", distlock.WithTTL(time.Minute)); !errors.Is(err, ErrOpenACL) {
		if err == nil {
			lease.Release(ctx)
		}
		t.Errorf("TryAcquire in a recreated key directory open to every IP: %v, want ErrOpenACL", err)
	}
}

// testTypoCreatedBaseNamed checks the documented limit of a base path the
// Locker creates itself: the first to run, with a wrong password, creates
// it for that password; the right password is then ErrAccessDenied, and
// the error says the base path may have been created with another
// password.
func testTypoCreatedBaseNamed(t *testing.T, s *secured) {
	ctx := ctxFor(t, 20*time.Second)
	const base = "/typo-created"
	s.open(t, "alice:typo-"+alicePassword, base).Close()
	l, err := distlock.Open(ctx, s.url(s.srv.SecureAddr(), "alice:"+alicePassword, base))
	if !errors.Is(err, distlock.ErrAccessDenied) || !strings.Contains(err.Error(), "created with another password") {
		if l != nil {
			l.Close()
		}
		t.Errorf("Open with the right password on a base path a wrong one created: %v, want ErrAccessDenied saying so", err)
	}
}

// testTLSPortMismatchNamed checks that plaintext to the TLS port, and TLS
// to the plaintext port, fail naming the likely cause rather than only
// "no session". Neither server answers anything, so Dial waits its
// context out: 2s here, both at once.
func testTLSPortMismatchNamed(t *testing.T, s *secured) {
	cases := []struct{ name, url, want string }{
		{"plaintext to the TLS port", "zk://alice:" + alicePassword + "@" + s.srv.SecureAddr() + "/mismatch", "TLS secureClientPort"},
		{"TLS to the plaintext port", s.url(s.srv.Addr(), "alice:"+alicePassword, "/mismatch"), "TLS handshake"},
	}
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			l, err := distlock.Open(ctx, c.url)
			if l != nil {
				l.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, c := range cases {
		t.Logf("%s: %v", c.name, errs[i])
		if err := errs[i]; !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), alicePassword) {
			t.Errorf("%s: %v, want ErrUnavailable naming %q", c.name, err, c.want)
		}
	}
}
