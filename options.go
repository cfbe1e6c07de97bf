package distlock

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Locker when passed to its constructor (or Open), and
// a single call when passed to Acquire, TryAcquire, Do or Lease.Refresh. Call
// options override constructor options. Options about the Locker as a whole
// (logger, observer, backend settings) are read only at construction.
type Option func(*Options)

// Options is the resolved configuration. Backends read it through
// [ResolveOptions]; users set it only through Option functions.
type Options struct {
	TTL            time.Duration // lease time to live
	AutoRenew      bool          // keep leases from Acquire/TryAcquire renewed
	RenewInterval  time.Duration // 0 means TTL/3
	DriftFactor    float64       // validity = TTL − (TTL·DriftFactor + DriftMin)
	DriftMin       time.Duration
	BackoffMin     time.Duration // first retry delay of a polling wait
	BackoffMax     time.Duration // cap of the exponential back-off
	ReleaseTimeout time.Duration // bound on the releases Do and Close make on their own
	Logger         *slog.Logger
	Observer       Observer

	err     error
	backend map[any]any
}

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

func defaultOptions() Options {
	return Options{
		TTL:            DefaultTTL,
		DriftFactor:    DefaultDriftFactor,
		DriftMin:       DefaultDriftMin,
		BackoffMin:     DefaultBackoffMin,
		BackoffMax:     DefaultBackoffMax,
		ReleaseTimeout: DefaultReleaseTimeout,
	}
}

// ResolveOptions applies opts to the defaults and reports the first invalid
// option. Backend constructors use it to read their own settings (see
// [BackendOption]); the portable layer uses it for everything else.
func ResolveOptions(opts ...Option) (Options, error) {
	o := defaultOptions()
	o.apply(opts)
	return o, o.err
}

func (o *Options) apply(opts []Option) {
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
}

func (o *Options) invalid(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// drift is the safety margin taken off a lease's validity for clock drift
// between this process and the servers, and for scheduling delays.
func (o *Options) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*o.DriftFactor) + o.DriftMin
}

func (o *Options) renewEvery(ttl time.Duration) time.Duration {
	if o.RenewInterval > 0 && o.RenewInterval < ttl {
		return o.RenewInterval
	}
	return ttl / 3
}

// WithTTL sets how long a lease lasts without a refresh. It must be positive
// and at most MaxTTL. Default 30s. Backends whose locks live as long as a
// session (see Guarantees.SessionTTL) use it only for the local deadline.
func WithTTL(ttl time.Duration) Option {
	return func(o *Options) { o.TTL = ttl }
}

// WithAutoRenew makes leases from Acquire and TryAcquire renew themselves in
// the background every RenewInterval until released or lost. Do always
// renews.
func WithAutoRenew(on bool) Option {
	return func(o *Options) { o.AutoRenew = on }
}

// WithRenewInterval sets how often a renewing lease refreshes (default TTL/3;
// values not below the TTL fall back to the default).
func WithRenewInterval(d time.Duration) Option {
	return func(o *Options) {
		if d < 0 {
			o.invalid("renew interval %v is negative", d)
			return
		}
		o.RenewInterval = d
	}
}

// WithDrift sets the clock-drift allowance: a lease's local deadline is the
// attempt start + validity − (TTL·factor + min). Defaults 0.01 and 2ms, as
// in the Redlock algorithm.
func WithDrift(factor float64, min time.Duration) Option {
	return func(o *Options) {
		if factor < 0 || factor >= 0.5 || min < 0 {
			o.invalid("drift factor %v / minimum %v out of range", factor, min)
			return
		}
		o.DriftFactor, o.DriftMin = factor, min
	}
}

// WithBackoff sets the retry delays of a waiting Acquire on backends without
// a native wait: full-jitter exponential back-off from min, capped at max.
// On notifying backends the cap also bounds the fallback poll.
func WithBackoff(min, max time.Duration) Option {
	return func(o *Options) {
		if min <= 0 || max < min || max > time.Hour {
			o.invalid("back-off %v..%v: need 0 < min <= max <= 1h", min, max)
			return
		}
		o.BackoffMin, o.BackoffMax = min, max
	}
}

// WithReleaseTimeout bounds the releases that Do (after fn) and Close make
// on their own context. Default 5s.
func WithReleaseTimeout(d time.Duration) Option {
	return func(o *Options) {
		if d <= 0 {
			o.invalid("release timeout %v must be positive", d)
			return
		}
		o.ReleaseTimeout = d
	}
}

// WithLogger sends the Locker's diagnostics (renewal failures, lost leases,
// failed releases) to l. By default nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(o *Options) { o.Logger = l }
}

// WithObserver reports lock events to ob, for metrics and tracing.
func WithObserver(ob Observer) Option {
	return func(o *Options) { o.Observer = ob }
}

// BackendOption builds an Option that carries a backend-specific setting
// under key (an unexported type of the backend package, as with
// context.WithValue). Backend packages use it to offer their own With…
// functions in the one Option style; see [BackendValue].
func BackendOption(key, value any) Option {
	return func(o *Options) {
		if o.backend == nil {
			o.backend = make(map[any]any)
		}
		o.backend[key] = value
	}
}

// BackendValue returns the setting stored under key by BackendOption.
func BackendValue[T any](o Options, key any) (T, bool) {
	v, ok := o.backend[key].(T)
	return v, ok
}

// BackendValueOr returns the setting stored under key, or def if none is.
func BackendValueOr[T any](o Options, key any, def T) T {
	if v, ok := BackendValue[T](o, key); ok {
		return v
	}
	return def
}

// InvalidOption returns an Option that makes construction fail with
// ErrInvalidOption and the given message; backend With… functions use it to
// reject bad values without panicking.
func InvalidOption(format string, args ...any) Option {
	return func(o *Options) { o.invalid(format, args...) }
}
