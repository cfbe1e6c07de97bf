package etcd

import (
	"strings"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the key prefix used when WithPrefix is not given.
const DefaultPrefix = "distlock"

type prefixKey struct{}
type lossWatchKey struct{}

// WithPrefix sets the etcd key prefix under which locks live (default
// "distlock"). Lockers share locks only if they use the same prefix. A
// trailing "/" is ignored; the prefix must not be empty.
func WithPrefix(prefix string) distlock.Option {
	p := strings.TrimRight(prefix, "/")
	if p == "" {
		return driver.InvalidOption("etcd: empty key prefix %q", prefix)
	}
	return driver.BackendOption("etcd", "WithPrefix", prefixKey{}, p)
}

// WithLossWatch turns on (the default) or off the watch each held lock keeps
// on its own key, which closes Lease.Done soon after the key is deleted
// (lease revoked or expired): within a round trip, or about 100 ms for a lock
// acquired less than 100 ms earlier (the watch is made only after that, so
// short holds do not pay for it). Without it a loss is noticed at the next
// refresh or at the local deadline.
func WithLossWatch(on bool) distlock.Option {
	return driver.BackendOption("etcd", "WithLossWatch", lossWatchKey{}, on)
}
