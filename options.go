package distlock

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/distlock/distlock/driver"
)

// Option configures a Locker: pass it to New, Open or a backend package's
// constructor. The compiler keeps an option where it applies:
//
//   - a CallOption (WithTTL, WithValue, WithAutoRenew…) may also be given to
//     a single call (Acquire, TryAcquire, Do, Watch) and overrides the
//     Locker's setting there;
//   - a RefreshOption (WithTTL) may also be given to Lease.Refresh;
//   - the others (WithLogger, WithObserver, WithReleaseTimeout,
//     WithFenceEpoch, WithTLSConfig, and every backend's own options, such
//     as redis.WithKeyPrefix) configure the Locker as a whole.
//
// Only a mix the compiler cannot see is refused at run time, with an error
// matching ErrInvalidOption: a backend's option given to another backend's
// constructor, to Open with another scheme, or to New.
type Option interface {
	// DriverOption returns the setting as the portable layer and the
	// backends apply it.
	DriverOption() driver.Option
}

// CallOption is an Option that a single call also takes.
type CallOption interface {
	Option
	callOption()
}

// RefreshOption is a CallOption that Lease.Refresh also takes.
type RefreshOption interface {
	CallOption
	refreshOption()
}

// callOpt is the type of the options a call takes.
type callOpt struct{ o driver.Option }

func (c callOpt) DriverOption() driver.Option { return c.o }
func (callOpt) callOption()                   {}

// ttlOpt is WithTTL's type: a call or a refresh takes it.
type ttlOpt struct{ callOpt }

func (ttlOpt) refreshOption() {}

// Defaults used when no option says otherwise.
const (
	DefaultTTL            = 30 * time.Second
	DefaultDriftFactor    = 0.01
	DefaultDriftMin       = 2 * time.Millisecond
	DefaultBackoffMin     = 5 * time.Millisecond
	DefaultBackoffMax     = 500 * time.Millisecond
	DefaultReleaseTimeout = 5 * time.Second

	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 512
	// MaxTTL is the longest TTL accepted.
	MaxTTL = 24 * time.Hour
)

// defaultSettings returns the settings before any option.
func defaultSettings() driver.Settings {
	return driver.Settings{
		TTL:            DefaultTTL,
		DriftFactor:    DefaultDriftFactor,
		DriftMin:       DefaultDriftMin,
		BackoffMin:     DefaultBackoffMin,
		BackoffMax:     DefaultBackoffMax,
		ReleaseTimeout: DefaultReleaseTimeout,
	}
}

func renewEvery(o *driver.Settings, ttl time.Duration) time.Duration {
	if o.RenewInterval > 0 && o.RenewInterval < ttl {
		return o.RenewInterval
	}
	return ttl / 3
}

func newCallOption(name string, apply func(*driver.Settings)) CallOption {
	return callOpt{driver.NewOption(name, apply)}
}

func lockerOption(name string, apply func(*driver.Settings)) Option {
	return driver.NewOption(name, apply)
}

// WithTTL sets how long a lease lasts without a refresh. It must be positive
// and at most MaxTTL. Default 30s. Backends whose locks live as long as a
// session (see Guarantees.SessionTTL) use it only for the local deadline.
func WithTTL(ttl time.Duration) RefreshOption {
	return ttlOpt{callOpt{driver.NewOption("WithTTL", func(o *driver.Settings) { o.TTL = ttl })}}
}

// WithAutoRenew makes leases from Acquire and TryAcquire renew themselves in
// the background every RenewInterval until released or lost. Do always
// renews.
func WithAutoRenew(on bool) CallOption {
	return newCallOption("WithAutoRenew", func(o *driver.Settings) { o.AutoRenew = on })
}

// WithRenewInterval sets how often a renewing lease refreshes (default TTL/3;
// values not below the TTL fall back to the default).
func WithRenewInterval(d time.Duration) CallOption {
	return newCallOption("WithRenewInterval", func(o *driver.Settings) {
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
func WithDrift(factor float64, min time.Duration) CallOption {
	return newCallOption("WithDrift", func(o *driver.Settings) {
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
func WithBackoff(min, max time.Duration) CallOption {
	return newCallOption("WithBackoff", func(o *driver.Settings) {
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
func WithValue(v string) CallOption {
	if len(v) > MaxValueLen {
		return callOpt{driver.InvalidOption("value of %d bytes: the limit is %d", len(v), MaxValueLen)}
	}
	return newCallOption("WithValue", func(o *driver.Settings) { o.Value = v })
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
	return driver.SharedOption("WithTLSConfig", func(o *driver.Settings) { o.TLS = cfg })
}

// WithLogger sends the Locker's diagnostics (renewal failures, lost leases,
// failed releases, and the backend's own) to l. By default nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return driver.SharedOption("WithLogger", func(o *driver.Settings) { o.Logger = l })
}

// WithObserver reports lock events to ob, for metrics and tracing. Each
// WithObserver adds one: events reach every observer given, in order.
func WithObserver(ob Observer) Option {
	if ob == nil {
		return driver.InvalidOption("nil observer")
	}
	return observerOpt{driver.NewOption("WithObserver", func(*driver.Settings) {}), ob}
}

// observerOpt is WithObserver's type: New collects the observers (observersOf).
type observerOpt struct {
	o  driver.Option
	ob Observer
}

func (o observerOpt) DriverOption() driver.Option { return o.o }

// observersOf returns the observers opts give, in order, or nil.
func observersOf(opts []Option) Observer {
	var obs observers
	for _, o := range opts {
		if oo, ok := o.(observerOpt); ok {
			obs = append(obs, oo.ob)
		}
	}
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return obs[0]
	}
	return obs
}

// observers sends each event to every one of them, in order.
type observers []Observer

func (os observers) Observe(ctx context.Context, e Event) {
	for _, o := range os {
		o.Observe(ctx, e)
	}
}
