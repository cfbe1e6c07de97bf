package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
	"github.com/distlock/distlock/internal/mutation"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

func init() {
	driver.Register("etcd", open)
	// etcds:// is etcd:// with TLS on: etcdctl turns TLS on by an
	// endpoint's https:// scheme, and one URL here has one scheme for
	// every endpoint (as rediss:// is redis:// with TLS).
	driver.Register("etcds", open)
}

// DefaultDialTimeout bounds how long Open waits for the cluster to answer
// (together with Open's context), unless the URL sets dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// The client Open makes pings each member every keepAliveTime while it has
// calls or watches there, and drops a connection that does not answer within
// keepAliveTimeout: a member that hangs with its connection open (SIGSTOP, a
// stalled disk, a silent network path) would otherwise take every call the
// balancer sends it until that call's context ended. etcd refuses pings more
// often than every 5 s (--grpc-keepalive-min-time), and gRPC sends none more
// often than every 10 s.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 5 * time.Second
)

// reconnect paces gRPC's new connections after a failed one. gRPC's own
// pacing grows to 120 s, so after a few failed attempts in one outage the
// client would sit idle for seconds after the network heals while its
// leases run out; a lock client reconnects within a second instead.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: DefaultDialTimeout,
}

// open serves etcd[s]://[user:password@]host:port[,host:port…]/?prefix=…&dial_timeout=…&loss_watch=…
// and the TLS and credential parameters of package driver/urlparam (tls, ca_file,
// cert_file, key_file, server_name, skip_verify, password_file). The client
// it makes belongs to the Locker and is closed by its Close.
func open(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
	dc, err := readURL(u, opts)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < dc.dial {
		// clientv3.New authenticates within DialTimeout, not ctx.
		dc.dial = max(time.Until(d), time.Millisecond)
	}
	if dc.tls == nil {
		err = urlparam.Reachable(ctx, dc.endpoints, dc.dial)
	} else {
		err = reachTLS(ctx, dc.endpoints, dc.tls, dc.dial)
	}
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(dc.clientConfig())
	if err != nil {
		// With a user, New authenticates: a wrong password fails here.
		return nil, dc.failed(ctx, fmt.Errorf("etcd: logging in as %q: %w", dc.user, err))
	}
	b, err := newBackend(cli, true, dc.opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	if err := b.probe(ctx, dc.dial); err != nil {
		_ = b.Close()
		return nil, dc.failed(ctx, err)
	}
	return b, nil
}

// dialConfig is what an etcd[s]:// URL, with Open's options, says to dial.
type dialConfig struct {
	endpoints      []string
	opts           []driver.Option // the URL's own, then the caller's
	dial           time.Duration
	tls            *tls.Config // nil: no TLS
	user, password string
}

// readURL reads u, before anything is dialled.
func readURL(u *url.URL, opts []driver.Option) (dialConfig, error) {
	q := urlparam.NewQuery(u)
	var own []driver.Option
	if p, ok := q.String("prefix"); ok {
		own = append(own, WithPrefix(p).DriverOption())
	}
	if v, ok := q.Bool("loss_watch"); ok {
		own = append(own, WithLossWatch(v).DriverOption())
	}
	dc := dialConfig{opts: append(own, opts...), dial: q.Timeout("dial_timeout", DefaultDialTimeout)}
	s, err := driver.ResolveBackend("etcd", dc.opts)
	if err != nil {
		return dc, err
	}
	tp := urlparam.ReadTLS(q, u.Scheme == "etcds", s.TLS)
	if dc.user, dc.password, err = urlparam.Credentials(q, u); err != nil {
		return dc, err
	}
	if err := q.Done(); err != nil {
		return dc, err
	}
	if u.Path != "" && u.Path != "/" {
		return dc, fmt.Errorf("%w: etcd: URL path %q is not used; set the key prefix with ?prefix=", distlock.ErrInvalidURL, u.Path)
	}
	if (dc.user == "") != (dc.password == "") {
		// The etcd client would silently send neither.
		return dc, fmt.Errorf("%w: etcd: a user needs a password (user:password@ or password_file=) and a password a user; "+
			"with a client certificate and no user, etcd takes the certificate's CN as the user", distlock.ErrInvalidURL)
	}
	if dc.endpoints, err = urlparam.Hosts(u, "2379"); err != nil {
		return dc, err
	}
	// No server name unless one is given: the client verifies each
	// endpoint's certificate for that endpoint's host.
	dc.tls, err = tp.Config("")
	return dc, err
}

// clientConfig is the configuration of the etcd client Open makes.
func (dc dialConfig) clientConfig() clientv3.Config {
	cfg := clientv3.Config{Endpoints: dc.endpoints, Logger: zap.NewNop(), TLS: dc.tls,
		Username: dc.user, Password: dc.password,
		DialKeepAliveTime: keepAliveTime, DialKeepAliveTimeout: keepAliveTimeout,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)}}
	if mutation.On("etcd-no-keepalive") { // mutation: etcd-no-keepalive
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0
	}
	if dc.user != "" {
		cfg.DialTimeout = dc.dial // bounds the authentication New does
	}
	return cfg
}

// probe asks the cluster something within timeout, so that a down cluster,
// or a role that may not use the prefix, fails Open: the client dials
// lazily. It reads the Locker's own range, prefix/…, the one range a role
// needs (a linearizable count: it needs a quorum).
func (b *backend) probe(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := b.cli.Get(pctx, b.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd: reading %s/…: %w", b.prefix, err)
	}
	return nil
}
