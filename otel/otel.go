package distlockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distlock/distlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope name the meter is created with.
const ScopeName = "github.com/distlock/distlock/otel"

// Attribute keys used on metrics and span events.
const (
	AttrBackend  = attribute.Key("distlock.backend")
	AttrOutcome  = attribute.Key("distlock.outcome")
	AttrKey      = attribute.Key("distlock.key")
	AttrToken    = attribute.Key("distlock.token")
	AttrDuration = attribute.Key("distlock.duration") // seconds, span events only
	AttrError    = attribute.Key("distlock.error")    // span events only
)

// Values of AttrOutcome.
const (
	OutcomeAcquired = "acquired"
	OutcomeBusy     = "busy"
	OutcomeTimeout  = "timeout"
	OutcomeCanceled = "canceled"
	OutcomeClosed   = "closed"
	OutcomeError    = "error"
	OutcomeReleased = "released"
	OutcomeLost     = "lost"
)

// Bucket boundaries, in seconds. The SDK's default boundaries suit
// milliseconds, not seconds.
var (
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	heldBuckets    = []float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600}
)

// Option configures [New].
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	keyAttr    func(string) string
	spanEvents bool
	err        error
}

// WithMeterProvider sets where the metrics go (default: the global
// MeterProvider, otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail("nil MeterProvider")
			return
		}
		c.mp = mp
	}
}

// WithKeyAttribute adds distlock.key to the metrics, with the value fn
// returns for the lock key; "" leaves the attribute out for that key. Use
// it to group keys into a bounded set, e.g. "cron:report:<slot>" into
// "cron:report"; pass func(k string) string { return k } only when the set
// of keys is small and fixed.
func WithKeyAttribute(fn func(key string) string) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("nil key attribute function")
			return
		}
		c.keyAttr = fn
	}
}

// WithSpanEvents turns the span events on or off (default on).
func WithSpanEvents(on bool) Option {
	return func(c *config) { c.spanEvents = on }
}

func (c *config) fail(msg string) {
	if c.err == nil {
		c.err = fmt.Errorf("distlockotel: %w: %s", distlock.ErrInvalidOption, msg)
	}
}

// Observer is a [distlock.Observer] that records metrics and span events.
// Pass it to a Locker with distlock.WithObserver; one Observer may serve
// many Lockers.
type Observer struct {
	keyAttr    func(string) string
	spanEvents bool

	acquire     metric.Float64Histogram
	contentions metric.Int64Counter
	refresh     metric.Float64Histogram
	refreshFail metric.Int64Counter
	lost        metric.Int64Counter
	held        metric.Float64Histogram

	mu    sync.Mutex
	spans map[leaseID]*tracked // span current at acquire, for released/lost
}

// leaseID names a lease as far as events can: tokens are unique per key
// within one backend deployment.
type leaseID struct {
	backend, key string
	token        distlock.Token
}

type tracked struct {
	span trace.Span // nil if not recording, or two live leases share the leaseID
	n    int        // acquires minus ends reported
}

var _ distlock.Observer = (*Observer)(nil)

// New returns an Observer. It fails, with an error matching
// distlock.ErrInvalidOption, on a nil option value, or if the MeterProvider
// refuses an instrument.
func New(opts ...Option) (*Observer, error) {
	c := config{spanEvents: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{keyAttr: c.keyAttr, spanEvents: c.spanEvents, spans: map[leaseID]*tracked{}}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.acquire, err = m.Float64Histogram("distlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time spent acquiring a lock, waits included."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	o.contentions, err = m.Int64Counter("distlock.acquire.contentions", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts that found the key held by another holder."))
	add(err)
	o.refresh, err = m.Float64Histogram("distlock.refresh.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of successful lease refreshes."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	add(err)
	o.refreshFail, err = m.Int64Counter("distlock.refresh.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Lease refreshes that failed with a server error."))
	add(err)
	o.lost, err = m.Int64Counter("distlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended without a Release."))
	add(err)
	o.held, err = m.Float64Histogram("distlock.lease.duration", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held."),
		metric.WithExplicitBucketBoundaries(heldBuckets...))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("distlockotel: creating instruments: %w", err)
	}
	return o, nil
}

// Observe implements distlock.Observer.
func (o *Observer) Observe(ctx context.Context, e distlock.Event) {
	base := []attribute.KeyValue{AttrBackend.String(e.Backend)}
	if o.keyAttr != nil {
		if v := o.keyAttr(e.Key); v != "" {
			base = append(base, AttrKey.String(v))
		}
	}
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(append(kv, base...)...)
	}
	secs := e.Duration.Seconds()

	switch e.Kind {
	case distlock.EventAcquired:
		o.acquire.Record(ctx, secs, with(AttrOutcome.String(OutcomeAcquired)))
	case distlock.EventAcquireFailed:
		o.acquire.Record(ctx, secs, with(AttrOutcome.String(outcome(e.Err))))
	case distlock.EventContended:
		o.contentions.Add(ctx, 1, with())
	case distlock.EventRefreshed:
		o.refresh.Record(ctx, secs, with())
	case distlock.EventRefreshFailed:
		o.refreshFail.Add(ctx, 1, with())
	case distlock.EventReleased:
		o.held.Record(ctx, secs, with(AttrOutcome.String(OutcomeReleased)))
	case distlock.EventLost:
		o.lost.Add(ctx, 1, with())
		o.held.Record(ctx, secs, with(AttrOutcome.String(OutcomeLost)))
	default:
		return // a kind added after this package was written
	}
	if o.spanEvents {
		o.spanEvent(ctx, e)
	}
}

// outcome classifies a failed acquire. Context errors come first: a wait
// cut short by ctx matches both ErrNotAcquired and ctx.Err().
func outcome(err error) string {
	switch {
	case errors.Is(err, distlock.ErrClosed):
		return OutcomeClosed
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, distlock.ErrNotAcquired):
		return OutcomeBusy
	default:
		return OutcomeError
	}
}

func (o *Observer) spanEvent(ctx context.Context, e distlock.Event) {
	span := trace.SpanFromContext(ctx)
	id := leaseID{e.Backend, e.Key, e.Token}
	switch e.Kind {
	case distlock.EventAcquired:
		o.remember(id, span)
	case distlock.EventReleased, distlock.EventLost:
		// Reported without the caller's context: use the acquire's span.
		if s := o.forget(id); !span.IsRecording() && s != nil {
			span = s
		}
	case distlock.EventRefreshed:
		return // routine; the histogram covers it
	}
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{AttrBackend.String(e.Backend), AttrKey.String(e.Key)}
	if e.Token != 0 {
		attrs = append(attrs, AttrToken.Int64(int64(e.Token)))
	}
	if e.Duration != 0 {
		attrs = append(attrs, AttrDuration.Float64(e.Duration.Seconds()))
	}
	if e.Kind == distlock.EventAcquireFailed {
		attrs = append(attrs, AttrOutcome.String(outcome(e.Err)))
	}
	if e.Err != nil {
		attrs = append(attrs, AttrError.String(e.Err.Error()))
	}
	span.AddEvent("distlock."+string(e.Kind), trace.WithAttributes(attrs...))
}

// remember keeps the span current at acquire (nil if not recording) until
// the lease ends. Every acquire is counted, so that two live leases with
// the same leaseID (one Observer shared by Lockers on separate deployments
// of one backend) are seen as ambiguous and neither gets the other's event.
func (o *Observer) remember(id leaseID, span trace.Span) {
	if !span.IsRecording() {
		span = nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.spans[id]
	if t == nil {
		o.spans[id] = &tracked{span: span, n: 1}
		return
	}
	t.span = nil
	if t.n++; t.n == 0 {
		delete(o.spans, id) // the lease ended before its acquire was reported
	}
}

// forget returns the span remember kept for id. A lease can end (lost at
// once) before its acquire is reported; the entry it leaves (n = -1) is
// consumed by that acquire.
func (o *Observer) forget(id leaseID) trace.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.spans[id]
	if t == nil {
		o.spans[id] = &tracked{n: -1}
		return nil
	}
	span := t.span
	if t.n--; t.n == 0 {
		delete(o.spans, id)
	}
	return span
}
