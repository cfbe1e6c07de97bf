package redlock

import (
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

type (
	prefixKey       struct{}
	nodeTimeoutKey  struct{}
	closeClientsKey struct{}
)

// MaxNodeTimeout bounds WithNodeTimeout, so that Close, which waits for calls
// still running on slow nodes, stays bounded too.
const MaxNodeTimeout = 10 * time.Second

// Option is an option of this backend, for its New, NewBackend and Open
// with a redlock:// URL; it is a distlock.Option, which single calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithKeyPrefix sets the prefix of every key and channel on every node
// (default redis.DefaultPrefix, so Redlock and single-Redis Lockers on the
// same server use the same keys). It must not contain '{' or '}'.
func WithKeyPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		return Option{driver.InvalidOption("redlock: key prefix %q contains a brace", prefix)}
	}
	return Option{driver.BackendOption("redlock", "WithKeyPrefix", prefixKey{}, prefix)}
}

// WithNodeTimeout bounds each call to one node (0 < d ≤ MaxNodeTimeout).
// The default is TTL/10 capped at 200ms: far below the TTL, so that a slow
// or dead node costs little validity, and well above a healthy round trip
// (including a first call that dials and loads the scripts). A node slower
// than this counts as not answering. A successful acquire does not wait for
// it: only failures and stragglers' background calls last this long.
func WithNodeTimeout(d time.Duration) Option {
	if d <= 0 || d > MaxNodeTimeout {
		return Option{driver.InvalidOption("redlock: node timeout %v (want 0 < d <= %v)", d, MaxNodeTimeout)}
	}
	return Option{driver.BackendOption("redlock", "WithNodeTimeout", nodeTimeoutKey{}, d)}
}

// WithCloseClients makes Close also close the node clients (default: the
// caller owns them). Lockers from distlock.Open always close theirs.
func WithCloseClients(on bool) Option {
	return Option{driver.BackendOption("redlock", "WithCloseClients", closeClientsKey{}, on)}
}

// defaultNodeTimeout is the node timeout for a TTL when none is set.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return max(min(ttl/10, 200*time.Millisecond), time.Millisecond)
}
