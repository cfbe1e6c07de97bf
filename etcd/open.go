package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mutation"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func init() {
	driver.Register("etcd", open)
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

// open serves etcd://host:port[,host:port…]/?prefix=…&dial_timeout=…&loss_watch=…
// The client it makes belongs to the Locker and is closed by its Close.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var own []distlock.Option
	if p, ok := q.String("prefix"); ok {
		own = append(own, WithPrefix(p))
	}
	if v, ok := q.Bool("loss_watch"); ok {
		own = append(own, WithLossWatch(v))
	}
	dial := q.Timeout("dial_timeout", DefaultDialTimeout)
	if err := q.Done(); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: etcd: URL path %q is not used; set the key prefix with ?prefix=", distlock.ErrInvalidURL, u.Path)
	}
	endpoints, err := driver.Hosts(u, "2379")
	if err != nil {
		return nil, err
	}
	opts = append(own, opts...)
	if _, err := driver.ResolveBackend("etcd", opts); err != nil {
		return nil, err // before dialling
	}
	if err := driver.Reachable(ctx, endpoints, dial); err != nil {
		return nil, err
	}
	cfg := clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(),
		DialKeepAliveTime: keepAliveTime, DialKeepAliveTimeout: keepAliveTimeout}
	if mutation.On("etcd-no-keepalive") { // mutation: etcd-no-keepalive
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = 0, 0
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		cfg.DialTimeout = dial // bounds the authentication New does
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: connecting to %v: %w", endpoints, err)
	}
	b, err := newBackend(cli, true, opts)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	// The client dials lazily: ask the cluster something (a linearizable
	// read needs a quorum) so a down cluster fails Open, within its deadline.
	pctx, cancel := context.WithTimeout(ctx, dial)
	_, err = cli.Get(pctx, b.prefix, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		_ = b.Close()
		return nil, driver.Unavailable(strings.Join(endpoints, ","), err)
	}
	return b, nil
}
