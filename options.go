package distlock

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/distlock/distlock/driver"
)

// Option configures a Locker when passed to its constructor (or Open), or a
// single call when passed to Acquire, TryAcquire, Do or Lease.Refresh. Call
// options override constructor options. Options about the Locker as a whole
// (WithLogger, WithObserver, WithReleaseTimeout) and backend options (such
// as redis.WithKeyPrefix) are accepted only at construction; passed to a
// call, or a backend's option to another backend, they fail with an error
// matching ErrInvalidOption.
type Option = driver.Option

// Defaults used when no option says otherwise.
const (
	DefaultTTL            = driver.DefaultTTL
	DefaultDriftFactor    = driver.DefaultDriftFactor
	DefaultDriftMin       = driver.DefaultDriftMin
	DefaultBackoffMin     = driver.DefaultBackoffMin
	DefaultBackoffMax     = driver.DefaultBackoffMax
	DefaultReleaseTimeout = driver.DefaultReleaseTimeout

	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 512
	// MaxTTL is the longest TTL accepted.
	MaxTTL = 24 * time.Hour
)

func defaultSettings() driver.Settings { return driver.Defaults() }

func renewEvery(o *driver.Settings, ttl time.Duration) time.Duration {
	if o.RenewInterval > 0 && o.RenewInterval < ttl {
		return o.RenewInterval
	}
	return ttl / 3
}

func callOption(name string, apply func(*driver.Settings)) Option {
	return driver.NewOption(name, driver.ScopeCall, apply)
}

func lockerOption(name string, apply func(*driver.Settings)) Option {
	return driver.NewOption(name, driver.ScopeLocker, apply)
}

// WithTTL sets how long a lease lasts without a refresh. It must be positive
// and at most MaxTTL. Default 30s. Backends whose locks live as long as a
// session (see Guarantees.SessionTTL) use it only for the local deadline.
func WithTTL(ttl time.Duration) Option {
	return callOption("WithTTL", func(o *driver.Settings) { o.TTL = ttl })
}

// WithAutoRenew makes leases from Acquire and TryAcquire renew themselves in
// the background every RenewInterval until released or lost. Do always
// renews.
func WithAutoRenew(on bool) Option {
	return callOption("WithAutoRenew", func(o *driver.Settings) { o.AutoRenew = on })
}

// WithRenewInterval sets how often a renewing lease refreshes (default TTL/3;
// values not below the TTL fall back to the default).
func WithRenewInterval(d time.Duration) Option {
	return callOption("WithRenewInterval", func(o *driver.Settings) {
		if d < 0 {
			o.Invalid("renew interval %v is negative", d)
			return
		}
		o.RenewInterval = d
	})
}

// WithDrift sets the clock-drift allowance: a lease's local deadline is the
// attempt start + validity − (TTL·factor + min). Defaults 0.01 and 2ms, as
// in the Redlock algorithm.
func WithDrift(factor float64, min time.Duration) Option {
	return callOption("WithDrift", func(o *driver.Settings) {
		if factor < 0 || factor >= 0.5 || min < 0 {
			o.Invalid("drift factor %v / minimum %v out of range", factor, min)
			return
		}
		o.DriftFactor, o.DriftMin = factor, min
	})
}

// WithBackoff sets the retry delays of a waiting Acquire on backends without
// a native wait: full-jitter exponential back-off from min, capped at max.
// On notifying backends the cap also bounds the fallback poll.
func WithBackoff(min, max time.Duration) Option {
	return callOption("WithBackoff", func(o *driver.Settings) {
		if min <= 0 || max < min || max > time.Hour {
			o.Invalid("back-off %v..%v: need 0 < min <= max <= 1h", min, max)
			return
		}
		o.BackoffMin, o.BackoffMax = min, max
	})
}

// WithValue stores v with the lock, for Inspect and Watch to report as the
// holder's value: a host name, an address, a version. At most MaxValueLen
// bytes; default "" (none).
func WithValue(v string) Option {
	if len(v) > driver.MaxValueLen {
		return driver.InvalidOption("value of %d bytes: the limit is %d", len(v), driver.MaxValueLen)
	}
	return callOption("WithValue", func(o *driver.Settings) { o.Value = v })
}

// WithReleaseTimeout bounds every release: Release, and the releases Do,
// Close and the give-backs make on their own. Default 5s.
func WithReleaseTimeout(d time.Duration) Option {
	return lockerOption("WithReleaseTimeout", func(o *driver.Settings) {
		if d <= 0 {
			o.Invalid("release timeout %v must be positive", d)
			return
		}
		o.ReleaseTimeout = d
	})
}

// WithFenceEpoch sets the fence epoch every lease's Fence carries (URL:
// fence_epoch=N; default 0). A fenced resource compares the epoch before the
// token: raise it when the key space moves to another backend or cluster,
// whose tokens do not continue the old ones. The first guarded write at the
// new epoch on a resource makes every holder of the old deployment stale
// there. See package fencing for the procedure.
func WithFenceEpoch(epoch int64) Option {
	return lockerOption("WithFenceEpoch", func(o *driver.Settings) {
		if epoch < 0 {
			o.Invalid("fence epoch %d is negative", epoch)
			return
		}
		o.FenceEpoch = epoch
	})
}

// WithTLSConfig is the TLS configuration Open gives the clients it makes
// (TLS on, whatever the URL's scheme): for what the URL's parameters
// (ca_file, cert_file, key_file, server_name; see each backend) cannot say.
// The URL's parameters amend a copy of it. Constructors that take a client
// ignore it: configure the client.
func WithTLSConfig(cfg *tls.Config) Option {
	return driver.NewOption("WithTLSConfig", driver.ScopeShared, func(o *driver.Settings) { o.TLS = cfg })
}

// WithLogger sends the Locker's diagnostics (renewal failures, lost leases,
// failed releases, and the backend's own) to l. By default nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return driver.NewOption("WithLogger", driver.ScopeShared, func(o *driver.Settings) { o.Logger = l })
}

// WithObserver reports lock events to ob, for metrics and tracing.
func WithObserver(ob Observer) Option {
	return lockerOption("WithObserver", func(o *driver.Settings) { o.Observer = ob })
}
