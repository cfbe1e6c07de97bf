package redlock

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

func init() {
	driver.Register("redlock", open)
}

// ErrNoQuorum is matched by the error of an acquire, refresh or release that
// could not reach a quorum of nodes; the message says how many answered. It
// also matches distlock.ErrUnavailable, so a waiting Acquire tries again.
var ErrNoQuorum error = noQuorum{}

type noQuorum struct{}

func (noQuorum) Error() string        { return "redlock: no quorum of nodes" }
func (noQuorum) Is(target error) bool { return target == driver.ErrUnavailable }

// New returns a Locker over clients, one per independent Redis node (an odd
// number, at least 3; two clients of one server are ErrInvalidOption, see
// the package doc). Close does not close the clients unless
// WithCloseClients(true).
func New(clients []goredis.UniversalClient, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := newClientBackend(clients, backendOpts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// NewBackend returns the raw Backend over clients, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes redlock's own
// options and WithLogger; the portable ones go to distlock.New.
func NewBackend(clients []goredis.UniversalClient, opts ...distlock.Option) (driver.Backend, error) {
	b, err := newClientBackend(clients, driver.Options(opts))
	if err != nil {
		return nil, err // not a nil *backend in a non-nil interface
	}
	return b, nil
}

// newClientBackend is newBackend for clients the caller made, which may
// reach one server twice (Open compares its URL's hosts instead).
func newClientBackend(clients []goredis.UniversalClient, opts []driver.Option) (*backend, error) {
	if err := checkClients(clients); err != nil {
		return nil, err
	}
	if err := distinctClients(clients); err != nil {
		return nil, err
	}
	return newBackend(clients, opts)
}

// checkClients checks the number of clients and that none is nil.
func checkClients(clients []goredis.UniversalClient) error {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: redlock: %d nodes (want an odd number, at least 3)", distlock.ErrInvalidOption, n)
	}
	for i, c := range clients {
		if c == nil {
			return fmt.Errorf("%w: redlock: client %d is nil", distlock.ErrInvalidOption, i)
		}
	}
	return nil
}

func newBackend(clients []goredis.UniversalClient, opts []driver.Option) (*backend, error) {
	if err := checkClients(clients); err != nil {
		return nil, err
	}
	n := len(clients)
	o, err := driver.ResolveBackend("redlock", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, redis.DefaultPrefix)
	nt, _ := driver.BackendValue[time.Duration](o, nodeTimeoutKey{})
	closeClients, _ := driver.BackendValue[bool](o, closeClientsKey{})
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler) // only WithLogger's logger speaks
	}
	b := &backend{
		prefix: prefix, quorum: n/2 + 1, nodeTimeout: nt, closeClients: closeClients,
	}
	for i, c := range clients {
		b.nodes = append(b.nodes, &node{client: c, dials: noteDials(c), notifier: redisnode.NewNotifier(c, prefix, onDenied(logger, prefix, nodeAddr(c, i)))})
		b.every = append(b.every, i)
	}
	b.every = slices.Clip(b.every) // shared: an append copies
	return b, nil
}

// node is one Redis server of the set.
type node struct {
	client   goredis.UniversalClient
	dials    *dialNote // the client's last failed dial, for errors
	notifier *redisnode.Notifier
	timedOut atomic.Int64 // unix ns of the last call that timed out, 0 after an answer (see noteCall)
}

// closeNodes stops the notifiers and, with WithCloseClients, the clients.
func (b *backend) closeNodes() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, nd := range b.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := nd.notifier.Close()
			if b.closeClients {
				err = errors.Join(err, nd.client.Close())
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
