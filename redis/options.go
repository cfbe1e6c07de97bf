package redis

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the key prefix used when WithKeyPrefix is not given.
const DefaultPrefix = "distlock:"

// EvictionCheck says what to do about a maxmemory-policy that can evict keys
// without a TTL (allkeys-*), such as the never-expiring token counter.
type EvictionCheck int

const (
	// EvictionWarn (the default) logs a warning to the WithLogger logger
	// (nothing is logged without one).
	EvictionWarn EvictionCheck = iota
	// EvictionRefuse makes the constructor fail with ErrEvictionPolicy when
	// the policy is allkeys-* or cannot be read.
	EvictionRefuse
	// EvictionIgnore skips the check (e.g. where CONFIG is disabled).
	EvictionIgnore
)

// String returns "warn", "refuse" or "ignore".
func (m EvictionCheck) String() string {
	switch m {
	case EvictionWarn:
		return "warn"
	case EvictionRefuse:
		return "refuse"
	case EvictionIgnore:
		return "ignore"
	}
	return fmt.Sprintf("EvictionCheck(%d)", int(m))
}

type (
	prefixKey      struct{}
	waitKey        struct{}
	evictionKey    struct{}
	closeClientKey struct{}
	fairKey        struct{}
)

type waitSetting struct {
	n       int
	timeout time.Duration
}

// Option is an option of this backend, for its New, NewBackend and Open
// with a redis:// or rediss:// URL; it is a distlock.Option, which single
// calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithKeyPrefix sets the prefix of every key and channel this backend uses
// (default DefaultPrefix). It must not contain '{' or '}', which would break
// the hash tag. Lockers that should exclude each other need the same prefix.
func WithKeyPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		return Option{driver.InvalidOption("redis: key prefix %q contains a brace", prefix)}
	}
	return Option{driver.BackendOption("redis", "WithKeyPrefix", prefixKey{}, prefix)}
}

// DefaultFairWindow is the hand-off window of the fair queue when
// WithFairQueue gives none.
const DefaultFairWindow = 250 * time.Millisecond

// MinFairWindow is the shortest hand-off window WithFairQueue takes.
const MinFairWindow = 10 * time.Millisecond

// WithFairQueue sets the hand-off window of the fair queue (0:
// DefaultFairWindow). By default waiting Acquires take the lock in the
// order they first found it held, as Redisson's fair lock does: waiters are
// kept in a sorted set next to the lock only while it is contended, and at
// a release the first of them has the window to come and take it, after
// which its place lapses, so a waiter whose process died holds the others
// up for about one window. TryAcquire still takes a free lock whoever
// waits, as the fair locks of java.util.concurrent do. Every Locker of a
// key should use the same setting: one WithoutFairQueue takes a free lock
// ahead of the queue. A window under MinFairWindow (other than 0) is
// ErrInvalidOption: waiters behind the first look again every window. A
// first waiter that cannot get notices (its subscription failed, so it
// polls with back-off) may miss its window and go to the back.
func WithFairQueue(window time.Duration) Option {
	if window != 0 && window < MinFairWindow {
		return Option{driver.InvalidOption("redis: fair queue window %v is under %v", window, MinFairWindow)}
	}
	if window == 0 {
		window = DefaultFairWindow
	}
	return Option{driver.BackendOption("redis", "WithFairQueue", fairKey{}, window)}
}

// WithoutFairQueue makes waiters race for the lock at every release, as
// with bsm/redislock, instead of queueing: no queue keys, and a release
// wakes every waiter of the key, so an unlucky one can lose many rounds in
// a row. Its releases still wake the first waiter of a queue that other
// Lockers keep on the key, and leave that waiter's place as long as it is.
func WithoutFairQueue() Option {
	return Option{driver.BackendOption("redis", "WithoutFairQueue", fairKey{}, time.Duration(0))}
}

// WithWaitReplicas makes every acquire and refresh wait, with Redis's WAIT,
// until n replicas acknowledged the write or timeout passed. Fewer acks fail
// the call with ErrNotReplicated (an acquire then gives the lock back). n = 0
// turns it off. It needs a *goredis.Client (plain or failover) or a
// *goredis.ClusterClient, since WAIT must run on the connection that wrote.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	switch {
	case n < 0:
		return Option{driver.InvalidOption("redis: wait for %d replicas", n)}
	case n > 0 && timeout <= 0:
		return Option{driver.InvalidOption("redis: replica wait timeout %v must be positive", timeout)}
	}
	return Option{driver.BackendOption("redis", "WithWaitReplicas", waitKey{}, waitSetting{n, timeout})}
}

// WithEvictionCheck sets what the constructor does about a maxmemory-policy
// that can evict the token counter (default EvictionWarn).
func WithEvictionCheck(mode EvictionCheck) Option {
	if mode < EvictionWarn || mode > EvictionIgnore {
		return Option{driver.InvalidOption("redis: unknown eviction check %d", int(mode))}
	}
	return Option{driver.BackendOption("redis", "WithEvictionCheck", evictionKey{}, mode)}
}

// WithCloseClient makes Close also close the client (default: the caller
// owns it). Lockers from distlock.Open always close theirs.
func WithCloseClient(on bool) Option {
	return Option{driver.BackendOption("redis", "WithCloseClient", closeClientKey{}, on)}
}
