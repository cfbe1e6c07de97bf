package zookeeper

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	driver.Register("zk", openURL)
}

// openURL implements zk://host:port,host:port/base/path?session_timeout=10s.
func openURL(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var urlOpts []distlock.Option
	if d, ok := q.Duration("session_timeout"); ok {
		urlOpts = append(urlOpts, WithSessionTimeout(d))
	}
	if d, ok := q.Duration("disconnect_grace"); ok {
		urlOpts = append(urlOpts, WithDisconnectGrace(d))
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	servers, err := driver.Hosts(u, "2181")
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		urlOpts = append(urlOpts, WithBasePath(strings.TrimSuffix(u.Path, "/")))
	}
	if err := driver.Reachable(ctx, servers, ConnectTimeout); err != nil {
		return nil, err
	}
	return dialBackend(ctx, servers, append(urlOpts, opts...))
}

// Dial connects to the servers (host:port each), waits for a session until
// ctx ends, and returns a Locker that owns the connection: Close ends the
// session, which frees every lock still held.
//
// Dial exists beside New because only a connection the backend dials itself
// can be watched for the session timeout the server granted and for the
// server's last answer (see the package documentation). To wrap such a
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
func dialBackend(ctx context.Context, servers []string, opts []distlock.Option) (driver.Backend, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", distlock.ErrInvalidOption)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: zookeeper: no servers", distlock.ErrInvalidOption)
	}
	for _, s := range servers {
		if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "/?#@ ") {
			return nil, fmt.Errorf("%w: zookeeper: bad server address %q", distlock.ErrInvalidOption, s)
		}
	}
	o, err := driver.ResolveBackend("zookeeper", opts)
	if err != nil {
		return nil, err
	}
	if _, ok := driver.BackendValue[<-chan zk.Event](o, eventsKey{}); ok {
		return nil, fmt.Errorf("%w: zookeeper: WithEvents is for New; Dial receives the events itself", distlock.ErrInvalidOption)
	}
	timeout := DefaultSessionTimeout
	if d, ok := driver.BackendValue[time.Duration](o, sessionTimeoutKey{}); ok {
		timeout = d
	}
	b := newBackend(o, timeout, true, len(servers))
	b.link = newLink()
	b.watches = true // onEvent is the event callback (below)

	// The link's dialer goes first: a caller's zk.WithDialer replaces it,
	// which is noticed below.
	var dialErr atomic.Value // the last failed dial, for Open's error
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, d)
		if err != nil {
			dialErr.Store(err)
		}
		return c, err
	}
	connOpts := []func(*zk.Conn){zk.WithLogger(zkLogger{o.Logger}), zk.WithLogInfo(false),
		zk.WithDialer(b.link.dialer(dial))}
	if extra, ok := driver.BackendValue[[]func(*zk.Conn)](o, connOptionsKey{}); ok {
		connOpts = append(connOpts, extra...)
	}
	// Last, so a caller's option cannot unhook the backend from its session.
	connOpts = append(connOpts, zk.WithEventCallback(b.onEvent))
	conn, _, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
		for _, f := range connOpts {
			f(c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: zookeeper: %w", distlock.ErrInvalidOption, err)
	}
	b.setConn(conn)
	abort := func() {
		b.quitOnce.Do(func() { close(b.quit); b.endLife() })
		b.sess.stop()
	}
	wait, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	select {
	case <-b.firstSession:
	case <-wait.Done():
		abort()
		go conn.Close() // may wait a second for a closeSession that cannot be sent
		cause := error(fmt.Errorf("no session within %v: %w", ConnectTimeout, wait.Err()))
		if err, ok := dialErr.Load().(error); ok {
			cause = fmt.Errorf("%w (last dial: %w)", cause, err)
		}
		return nil, driver.Unavailable(strings.Join(servers, ","), cause)
	}
	// The first session's connect response passed through the link before
	// the event that closed firstSession, unless another dialer made it.
	granted := b.link.granted()
	if granted == 0 {
		b.log(slog.LevelWarn, "a dialer in WithConnOptions replaced the one that watches the connection: the granted session timeout is unknown, and leases are reported lost at the first disconnect")
		if b.graceSet && b.grace > 0 {
			abort()
			conn.Close()
			return nil, fmt.Errorf("%w: zookeeper: disconnect grace %v: with a dialer of its own, Dial cannot see the session timeout the server granted, and no grace above zero can be shown safe",
				distlock.ErrInvalidOption, b.grace)
		}
	} else if b.graceSet && b.grace >= silenceBound(granted) {
		abort()
		conn.Close()
		return nil, fmt.Errorf("%w: zookeeper: disconnect grace %v is not below %v, two thirds of the session timeout the server granted (%v; asked %v): leases are reported lost after that much silence whatever the grace",
			distlock.ErrInvalidOption, b.grace, silenceBound(granted), granted, timeout)
	}
	b.start()
	return b, nil
}

// zkLogger sends go-zookeeper's log lines to the distlock logger at debug
// level, or nowhere.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	if z.l != nil {
		z.l.Debug("distlock: zookeeper client: " + fmt.Sprintf(format, args...))
	}
}
