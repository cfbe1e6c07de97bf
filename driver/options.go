package driver

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"
)

// Option is one setting: a portable one (distlock.WithTTL…) or a backend's
// own (BackendOption). Package distlock's Option types keep the Locker-wide
// and backend options out of single calls at compile time; passing a
// backend's option to another backend's constructor is an error matching
// ErrInvalidOption, never silently ignored.
type Option struct {
	name   string
	shared bool   // read by the backend as well as the portable layer
	owner  string // the backend a backend option belongs to
	apply  func(*Settings)
}

// DriverOption returns o: an Option is one of package distlock's Options.
func (o Option) DriverOption() Option { return o }

// NewOption builds a portable option, one the portable layer reads;
// package distlock's With… functions use it.
func NewOption(name string, apply func(*Settings)) Option {
	return Option{name: name, apply: apply}
}

// SharedOption builds a portable option that backends read too (a logger,
// a TLS config): constructors, NewBackend and Open accept it.
func SharedOption(name string, apply func(*Settings)) Option {
	return Option{name: name, shared: true, apply: apply}
}

// BackendOption builds an option that carries a setting of one backend
// under key (an unexported type of the backend package, as with
// context.WithValue); name is the option's function name, for errors. Only
// that backend's constructor and URL opener accept it; read it with
// [BackendValue].
func BackendOption(backend, name string, key, value any) Option {
	return Option{name: name, owner: backend, apply: func(s *Settings) {
		if s.backend == nil {
			s.backend = make(map[any]any)
		}
		s.backend[key] = value
	}}
}

// InvalidOption returns an option that makes whatever it is passed to fail
// with ErrInvalidOption and the given message: With… functions use it to
// reject bad values without panicking.
func InvalidOption(format string, args ...any) Option {
	// Shared: every resolver applies it, so the error is the message given.
	return Option{name: "invalid option", shared: true, apply: func(s *Settings) { s.Invalid(format, args...) }}
}

// Settings are resolved options.
type Settings struct {
	TTL            time.Duration // lease time to live
	AutoRenew      bool          // keep leases from Acquire/TryAcquire renewed
	RenewInterval  time.Duration // 0 means TTL/3
	DriftFactor    float64       // validity = TTL − (TTL·DriftFactor + DriftMin)
	DriftMin       time.Duration
	BackoffMin     time.Duration // first retry delay of a polling wait
	BackoffMax     time.Duration // cap of the exponential back-off
	ReleaseTimeout time.Duration // bound on every release
	Logger         *slog.Logger  // nil: nothing is logged
	Value          string        // the holder's value stored with each lock (WithValue)
	FenceEpoch     int64         // Lease.Fence().Epoch (WithFenceEpoch)
	TLS            *tls.Config   // the base TLS config of Open's clients (WithTLSConfig)

	err     error
	backend map[any]any
}

// Invalid records the first invalid setting; Resolve then fails with it.
func (s *Settings) Invalid(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// Drift is the safety margin taken off a lease's validity for clock drift
// between the client and the servers, and for scheduling delays.
func (s *Settings) Drift(ttl time.Duration) time.Duration { return s.DriftRule().For(ttl) }

// DriftRule returns the drift settings as the portable layer hands them to
// backends in Request and Grant.
func (s *Settings) DriftRule() Drift { return Drift{Factor: s.DriftFactor, Min: s.DriftMin} }

// Drift is the clock-drift rule (WithDrift): the one validity formula the
// portable layer and every backend use.
type Drift struct {
	Factor float64
	Min    time.Duration
}

// For returns the allowance for a lock of ttl: ttl·Factor + Min. The
// portable layer always fills in a Request's and a Grant's Drift; the zero
// Drift is WithDrift(0, 0), no margin.
func (d Drift) For(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*d.Factor) + d.Min
}

// ResolveLocker applies opts, as given to distlock.New, on top of base.
// Backend options are refused: the backend they configure is built already.
func ResolveLocker(base Settings, backend string, opts []Option) (Settings, error) {
	s := base
	s.backend = nil
	for _, o := range opts {
		switch {
		case o.apply == nil:
		case o.owner != "":
			s.Invalid("%s configures the %s backend: pass it to %s.New, NewBackend or Open, not to distlock.New (of a %s backend)",
				o.name, o.owner, o.owner, backend)
		default:
			o.apply(&s)
		}
	}
	return s, s.err
}

// ResolveBackend applies opts, as given to the constructor of backend (its
// Guarantees().Backend name), on top of the defaults: that backend's own
// options and the shared ones (the logger). Another backend's option, or a
// portable setting the backend cannot apply (a TTL, a release timeout), is
// an error matching ErrInvalidOption.
func ResolveBackend(backend string, opts []Option) (Settings, error) {
	var s Settings
	for _, o := range opts {
		switch {
		case o.apply == nil:
		case o.owner != "" && o.owner != backend:
			s.Invalid("%s is an option of the %s backend, not of %s", o.name, o.owner, backend)
		case o.owner == "" && !o.shared:
			s.Invalid("%s configures the Locker, not the %s backend: pass it to %s.New, Open or distlock.New",
				o.name, backend, backend)
		default:
			o.apply(&s)
		}
	}
	return s, s.err
}

// Options returns the settings of package distlock's Options, in order.
// A nil one, such as a variable left unset, sets nothing.
func Options[O interface{ DriverOption() Option }](opts []O) []Option {
	out := make([]Option, 0, len(opts))
	for _, o := range opts {
		if any(o) != nil {
			out = append(out, o.DriverOption())
		}
	}
	return out
}

// SplitOptions separates the options given to a backend package's New (or
// to an opener) into those for distlock.New (portable and shared) and those
// for the backend's own constructor (its options and the shared ones).
func SplitOptions[O interface{ DriverOption() Option }](opts []O) (locker []O, backend []Option) {
	for _, x := range opts {
		if any(x) == nil {
			continue // sets nothing
		}
		o := x.DriverOption()
		if o.owner == "" {
			locker = append(locker, x)
		}
		if o.owner != "" || o.shared {
			backend = append(backend, o)
		}
	}
	return locker, backend
}

// Apply applies opts on top of base whoever they belong to: the options of
// one call (package distlock's CallOptions, the compiler keeps the others
// out) on top of the Locker's settings, or every option given to Open, to
// report an invalid value before any connection is made.
func Apply(base Settings, opts []Option) (Settings, error) {
	s := base
	s.err = nil
	s.backend = nil
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&s)
		}
	}
	return s, s.err
}

// BackendValue returns the setting stored under key by BackendOption.
func BackendValue[T any](s Settings, key any) (T, bool) {
	v, ok := s.backend[key].(T)
	return v, ok
}

// BackendValueOr returns the setting stored under key, or def if none is.
func BackendValueOr[T any](s Settings, key any, def T) T {
	if v, ok := BackendValue[T](s, key); ok {
		return v
	}
	return def
}
