package zookeeper

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock/internal/clock"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
)

func init() {
	driver.Register("zk", openURL)
}

// openURL implements
//
//	zk://[user:password@]host:port,host:port/base/path?session_timeout=10s
//
// with digest auth from the userinfo (or password_file=), TLS from tls,
// ca_file, cert_file, key_file, server_name and skip_verify (see package
// driver/urlparam), and allow_open_acl=true for WithAllowOpenACL.
func openURL(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
	q := urlparam.NewQuery(u)
	var urlOpts []driver.Option
	if d, ok := q.Duration("session_timeout"); ok {
		urlOpts = append(urlOpts, WithSessionTimeout(d).DriverOption())
	}
	if d, ok := q.Duration("disconnect_grace"); ok {
		urlOpts = append(urlOpts, WithDisconnectGrace(d).DriverOption())
	}
	if b, ok := q.Bool("allow_open_acl"); ok {
		urlOpts = append(urlOpts, WithAllowOpenACL(b).DriverOption())
	}
	secure, err := urlSecurity(q, u, opts)
	if err != nil {
		return nil, err
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	servers, err := urlparam.Hosts(u, "2181")
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		urlOpts = append(urlOpts, WithBasePath(strings.TrimSuffix(u.Path, "/")).DriverOption())
	}
	if err := urlparam.Reachable(ctx, servers, ConnectTimeout); err != nil {
		return nil, err
	}
	// The URL's TLS parameters amend the caller's WithTLSConfig, so they
	// come after it.
	return dialBackend(ctx, servers, append(append(urlOpts, opts...), secure...))
}

// urlSecurity reads the URL's credentials (digest auth) and TLS
// parameters into options. Its errors name files and parameters, never a
// password.
func urlSecurity(q *urlparam.Query, u *url.URL, opts []driver.Option) ([]driver.Option, error) {
	var out []driver.Option
	user, password, err := urlparam.Credentials(q, u)
	if err != nil {
		return nil, err
	}
	switch {
	case user == "" && password == "":
	case user == "" || password == "":
		return nil, fmt.Errorf("%w: zk:// digest auth needs both a user and a password (user:password@ or password_file=)", driver.ErrInvalidURL)
	case strings.Contains(user, ":"):
		// Only the part before the ':': the rest may be a password, as
		// Curator's "user:password" written percent-encoded as the user.
		before, _, _ := strings.Cut(user, ":")
		return nil, fmt.Errorf("%w: zk:// user name %q… holds a ':', which digest auth cannot tell from the password's", driver.ErrInvalidURL, before+":")
	default:
		out = append(out, WithAuth("digest", []byte(user+":"+password)).DriverOption())
	}
	o, err := driver.ResolveBackend("zookeeper", opts)
	if err != nil {
		return nil, err
	}
	cfg, err := urlparam.ReadTLS(q, false, o.TLS).Config("") // "": each server's own host name
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		out = append(out, distlock.WithTLSConfig(cfg).DriverOption())
	}
	return out, nil
}

// Dial connects to the servers (host:port each), waits for a session until
// ctx ends, and returns a Locker that owns the connection: Close ends the
// session, which frees every lock still held.
//
// Dial exists beside New because only a connection the backend dials itself
// can be watched for the session timeout the server granted and for the
// server's last answer (see "Loss notice before takeover" in
// docs/backends/zookeeper.md). To wrap such a
// backend (middleware), get it from the "zk" URL opener, driver.Lookup("zk"),
// which dials the same way.
func Dial(ctx context.Context, servers []string, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := dialBackend(ctx, servers, backendOpts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// dialBackend is Dial's raw Backend: Dial, the zk:// opener and this
// package's tests wrap it.
func dialBackend(ctx context.Context, servers []string, opts []driver.Option) (driver.Backend, error) {
	o, err := dialSettings(ctx, servers, opts)
	if err != nil {
		return nil, err
	}
	timeout := DefaultSessionTimeout
	if d, ok := driver.BackendValue[time.Duration](o, sessionTimeoutKey{}); ok {
		timeout = d
	}
	b := newBackend(o, timeout, true, len(servers))
	b.addr = strings.Join(servers, ",")
	if open, ok := ownOpenEntry(b.acl); ok && b.auth.scheme != "" && !b.allowOpen {
		b.abort()
		return nil, fmt.Errorf("%w: with credentials the Locker's ACL must not grant %s create, delete or admin (anyone who reaches the server from there could delete its locks); drop WithACL for the user's own ACL, or accept it with allow_open_acl=true (WithAllowOpenACL)",
			ErrOpenACL, entryName(open))
	}
	b.link = newLink()
	b.watches = true // onEvent is the event callback (below)

	// The link's dialer goes first: a caller's zk.WithDialer replaces it,
	// which is noticed below.
	dials := newDialLog()
	connOpts := []func(*zk.Conn){zk.WithLogger(zkLogger{o.Logger}), zk.WithLogInfo(false),
		zk.WithDialer(b.link.dialer(dials.dialer(o.TLS)))}
	if o.TLS != nil {
		connOpts = append(connOpts, zk.WithHostProvider(dials.hosts))
	}
	if extra, ok := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		connOpts = append(connOpts, extra...)
	}
	// Last, so a caller's option cannot unhook the backend from its session.
	connOpts = append(connOpts, zk.WithEventCallback(b.onEvent))
	wait, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	_, callerOpts := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{})
	conn, err := connect(wait, servers, timeout, connOpts, callerOpts)
	if err != nil {
		b.abort()
		return nil, err
	}
	b.setConn(conn)
	if err := b.firstContact(wait, conn, dials); err != nil {
		b.abort()
		go conn.Close() // may wait a second for a closeSession that cannot be sent
		return nil, err
	}
	if err := b.checkGrace(timeout); err != nil {
		b.abort()
		conn.Close()
		return nil, err
	}
	b.start()
	return b, nil
}

// connect runs zk.Connect within ctx. It resolves the servers and applies
// the options before its connection runs, so an option that calls the
// *zk.Conn (AddAuth in WithConnOptions) would block it for ever.
// callerOpts: opts hold WithConnOptions' options.
func connect(ctx context.Context, servers []string, timeout time.Duration, opts []func(*zk.Conn), callerOpts bool) (*zk.Conn, error) {
	type result struct {
		c   *zk.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, _, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
			for _, f := range opts {
				f(c)
			}
		})
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("%w: zookeeper: %w", distlock.ErrInvalidOption, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() { // a late one is closed; a blocked one stays blocked
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		if !callerOpts {
			return nil, driver.Unavailable(strings.Join(servers, ","), fmt.Errorf("zookeeper: resolving the servers: %w", ctx.Err()))
		}
		return nil, fmt.Errorf("%w: zookeeper: zk.Connect did not return within the dial's time (%w): it resolves the servers, then applies WithConnOptions' options, which run before the connection does: one that calls the *zk.Conn (AddAuth) blocks for ever; use WithAuth",
			distlock.ErrInvalidOption, ctx.Err())
	}
}

// dialSettings checks Dial's arguments and resolves its options.
func dialSettings(ctx context.Context, servers []string, opts []driver.Option) (driver.Settings, error) {
	if ctx == nil {
		return driver.Settings{}, fmt.Errorf("%w: nil context", distlock.ErrInvalidOption)
	}
	if len(servers) == 0 {
		return driver.Settings{}, fmt.Errorf("%w: zookeeper: no servers", distlock.ErrInvalidOption)
	}
	for _, s := range servers {
		if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "/?#@ ") {
			return driver.Settings{}, fmt.Errorf("%w: zookeeper: bad server address %q", distlock.ErrInvalidOption, s)
		}
	}
	o, err := driver.ResolveBackend("zookeeper", opts)
	if err != nil {
		return driver.Settings{}, err
	}
	if _, ok := driver.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		return driver.Settings{}, fmt.Errorf("%w: zookeeper: WithEvents is for New; Dial receives the events itself", distlock.ErrInvalidOption)
	}
	return o, nil
}

// abort stops what newBackend started, for a Dial that fails.
func (b *backend) abort() {
	b.quitOnce.Do(func() { close(b.quit); b.endLife() })
	b.sess.stop()
}

// firstContact waits for the first session, then authenticates it and
// checks the base path, all within ctx. A server that refuses the client
// (its certificate, or ours) is ErrAccessDenied as soon as every server
// has, or at ctx's end if one has; no session otherwise is ErrUnavailable.
func (b *backend) firstContact(ctx context.Context, conn *zk.Conn, dials *dialLog) error {
	select {
	case <-b.firstSession:
	case <-dials.allRefused:
		return driver.AccessDenied(b.addr, dials.refusal())
	case <-ctx.Done():
		if err := dials.refusal(); err != nil {
			return driver.AccessDenied(b.addr, err)
		}
		cause := error(fmt.Errorf("no session within %v: %w", ConnectTimeout, ctx.Err()))
		if err := dials.last(); err != nil {
			cause = fmt.Errorf("%w (last dial: %w)", cause, err)
		}
		return driver.Unavailable(b.addr, cause)
	}
	// Before any credential goes out: a caller's zk.WithDialer replaced
	// the one that does the TLS handshake.
	if dials.tls && b.link.dials.Load() == 0 {
		return fmt.Errorf("%w: zookeeper: TLS was asked for (the URL or WithTLSConfig), but a zk.WithDialer in WithConnOptions replaced the dialer that makes it", distlock.ErrInvalidOption)
	}
	if b.auth.scheme != "" {
		if err := b.authenticate(ctx, conn); err != nil {
			return err
		}
	}
	if b.auth.scheme != "" || b.checkACL {
		return b.checkBase(ctx, conn)
	}
	return nil
}

// authenticate adds the credentials to the session. go-zookeeper then
// sends them again first thing on every later connection, before any
// request queued meanwhile, and on a new session after an expiry. A
// connection lost before the answer is tried again, within ctx.
func (b *backend) authenticate(ctx context.Context, conn *zk.Conn) error {
	for {
		_, err := call(b, ctx, func() (struct{}, error) { return struct{}{}, conn.AddAuth(b.auth.scheme, b.auth.data) })
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return driver.Unavailable(b.addr, fmt.Errorf("zookeeper: %s auth not answered within %v: %w", b.auth.scheme, ConnectTimeout, ctx.Err()))
		case !reconnecting(err):
			return b.classify(fmt.Errorf("zookeeper: %s auth: %w", b.auth.scheme, err))
		}
		if err := clock.Sleep(ctx, 20*time.Millisecond); err != nil {
			return driver.Unavailable(b.addr, fmt.Errorf("zookeeper: %s auth not answered within %v: %w", b.auth.scheme, ConnectTimeout, err))
		}
	}
}

// checkGrace checks the disconnect grace against the session timeout the
// server granted the first session.
func (b *backend) checkGrace(timeout time.Duration) error {
	// The first session's connect response passed through the link before
	// the event that closed firstSession, unless another dialer made it.
	granted := b.link.granted()
	if granted == 0 {
		b.log(slog.LevelWarn, "a dialer in WithConnOptions replaced the one that watches the connection: the granted session timeout is unknown, and leases are reported lost at the first disconnect")
		if b.graceSet && b.grace > 0 {
			return fmt.Errorf("%w: zookeeper: disconnect grace %v: with a dialer of its own, Dial cannot see the session timeout the server granted, and no grace above zero can be shown safe",
				distlock.ErrInvalidOption, b.grace)
		}
	} else if b.graceSet && b.grace >= silenceBound(granted) {
		return fmt.Errorf("%w: zookeeper: disconnect grace %v is not below %v, two thirds of the session timeout the server granted (%v; asked %v): leases are reported lost after that much silence whatever the grace",
			distlock.ErrInvalidOption, b.grace, silenceBound(granted), granted, timeout)
	}
	return nil
}

// zkLogger sends go-zookeeper's log lines to the distlock logger at debug
// level, or nowhere.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l != nil {
		z.l.Debug("distlock: zookeeper client: " + fmt.Sprintf(format, args...))
	}
}
