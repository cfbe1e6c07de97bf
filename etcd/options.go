package etcd

import (
	"strings"

	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the key prefix used when WithPrefix is not given.
const DefaultPrefix = "distlock"

type prefixKey struct{}
type lossWatchKey struct{}

// Option is an option of this backend, for its New, NewBackend and Open
// with an etcd:// or etcds:// URL; it is a distlock.Option, which single
// calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithPrefix sets the etcd key prefix under which locks live (default
// "distlock"). Lockers share locks only if they use the same prefix. A
// trailing "/" is ignored; the prefix must not be empty.
func WithPrefix(prefix string) Option {
	p := strings.TrimRight(prefix, "/")
	if p == "" {
		return Option{driver.InvalidOption("etcd: empty key prefix %q", prefix)}
	}
	return Option{driver.BackendOption("etcd", "WithPrefix", prefixKey{}, p)}
}

// WithLossWatch turns on (the default) or off the loss watch, which closes
// Lease.Done soon after a held lock's key is deleted (lease revoked or
// expired on the server, key removed by hand): within a round trip or two
// of the deletion while the server answers. It watches each key's queue
// while the Locker holds or waits for it (and for 5 s after), all on one
// gRPC stream of the Locker's, so it hears only its own keys' queues.
// Without it a loss is noticed at the next refresh or at the local
// deadline.
func WithLossWatch(on bool) Option {
	return Option{driver.BackendOption("etcd", "WithLossWatch", lossWatchKey{}, on)}
}
