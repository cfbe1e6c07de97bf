package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

func init() {
	driver.Register("redis", open)
	driver.Register("rediss", open)
}

// Errors of this backend, wrapped in the errors it returns.
var (
	// ErrNotReplicated: WithWaitReplicas is set and fewer replicas than
	// required acknowledged a lock write in time. An acquire that fails
	// this way has given the lock back.
	ErrNotReplicated = errors.New("redis: lock write not acknowledged by enough replicas")

	// ErrEvictionPolicy: WithEvictionCheck(EvictionRefuse) found a
	// maxmemory-policy that can evict the token counter, or could not read
	// the policy.
	ErrEvictionPolicy = errors.New("redis: maxmemory-policy may evict the fencing-token counter")
)

// setupTimeout bounds the eviction check of New and NewBackend, which take
// no context.
const setupTimeout = 5 * time.Second

// New returns a Locker on client. Unless WithEvictionCheck(EvictionIgnore)
// is given it reads the server's maxmemory-policy once (CONFIG GET, bounded
// by 5s). Close does not close client unless WithCloseClient(true).
func New(client goredis.UniversalClient, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := newBackendNow(client, backendOpts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// NewBackend returns the raw Backend on client, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes redis's own
// options and WithLogger; the portable ones go to distlock.New.
func NewBackend(client goredis.UniversalClient, opts ...distlock.Option) (driver.Backend, error) {
	return newBackendNow(client, driver.Options(opts))
}

// newBackendNow is newBackend bounded by setupTimeout.
func newBackendNow(client goredis.UniversalClient, opts []driver.Option) (driver.Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	b, err := newBackend(ctx, client, opts)
	if err != nil {
		return nil, err // not a nil *backend in a non-nil interface
	}
	return b, nil
}

func newBackend(ctx context.Context, client goredis.UniversalClient, opts []driver.Option) (*backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis: nil client", distlock.ErrInvalidOption)
	}
	o, err := driver.ResolveBackend("redis", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, DefaultPrefix)
	wait, _ := driver.BackendValue[waitSetting](o, waitKey{})
	if wait.n > 0 {
		switch client.(type) {
		case *goredis.Client, *goredis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: redis: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T",
				distlock.ErrInvalidOption, client)
		}
	}
	closeClient, _ := driver.BackendValue[bool](o, closeClientKey{})
	fair, set := driver.BackendValue[time.Duration](o, fairKey{})
	if !set {
		fair = DefaultFairWindow
	}
	mode, _ := driver.BackendValue[EvictionCheck](o, evictionKey{})
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler) // only WithLogger's logger speaks
	}
	if err := checkEviction(ctx, client, mode, logger); err != nil {
		return nil, err
	}
	b := &backend{
		client: client, addr: clientAddr(client), prefix: prefix, wait: wait, closeClient: closeClient, fair: fair,
	}
	b.notifier = redisnode.NewNotifier(client, prefix, func(err error) {
		logger.Warn("distlock: redis: the server refuses release notices (SUBSCRIBE to "+prefix+"{…}:released); waiters poll instead",
			slog.String("addr", b.addr), slog.Any("error", err))
	})
	return b, nil
}

// clientAddr names client's server(s) for errors and logs.
func clientAddr(client goredis.UniversalClient) string {
	switch c := client.(type) {
	case *goredis.Client:
		return c.Options().Addr // "FailoverClient" for a Sentinel client: Open names those itself
	case *goredis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *goredis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", client)
}
