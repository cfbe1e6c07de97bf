package distlockotel

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type harness struct {
	obs    *Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := New(append([]Option{WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{obs: obs, reader: reader, spans: spans, tracer: tp.Tracer("test")}
}

// point is one exported data point: a counter's value or a histogram's count.
type point struct {
	attrs attribute.Set
	n     int64
	sum   float64
}

func (h *harness) collect(t *testing.T) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s: counter is not monotonic", m.Name)
				}
				for _, dp := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: dp.Attributes, n: dp.Value})
				}
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					t.Errorf("%s: unit %q, want s", m.Name, m.Unit)
				}
				for _, dp := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: dp.Attributes, n: int64(dp.Count), sum: dp.Sum})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// total adds up the points of a metric whose attributes include all of want.
func total(points []point, want ...attribute.KeyValue) int64 {
	var n int64
	for _, p := range points {
		ok := true
		for _, kv := range want {
			if v, has := p.attrs.Value(kv.Key); !has || v != kv.Value {
				ok = false
			}
		}
		if ok {
			n += p.n
		}
	}
	return n
}

// eventually polls the metrics until cond holds: a lease's loss is reported
// by its background goroutine just after Done closes.
func (h *harness) eventually(t *testing.T, what string, cond func(map[string][]point) bool) map[string][]point {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := h.collect(t)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; metrics: %v", what, m)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

func eventAttr(s sdktrace.ReadOnlySpan, event string, key attribute.Key) (attribute.Value, bool) {
	for _, e := range s.Events() {
		if e.Name != event {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == key {
				return kv.Value, true
			}
		}
	}
	return attribute.Value{}, false
}

func spanByName(t *testing.T, h *harness, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range h.spans.Ended() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("span %q not ended", name)
	return nil
}

// flaky is a memory backend whose Refresh fails with a server-like error
// while fail is set.
type flaky struct {
	driver.Backend
	fail atomic.Bool
}

var errFlaky = errors.New("injected server error")

func (f *flaky) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	if f.fail.Load() {
		return 0, errFlaky
	}
	return f.Backend.Refresh(ctx, g, ttl)
}

// TestLifecycle drives real memory Lockers through acquire, busy, timeout,
// contention, release, refresh failure and a forced loss, then checks the
// exported metrics and span events.
func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	bg := context.Background()
	store := memory.NewStore()
	newLocker := func() distlock.Locker {
		l, err := memory.New(memory.WithStore(store), distlock.WithObserver(h.obs), distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	l1, l2 := newLocker(), newLocker()

	// 1. Acquire under a span; the release is reported on that span later.
	jobCtx, job := h.tracer.Start(bg, "job")
	lease, err := l1.Acquire(jobCtx, "k")
	if err != nil {
		t.Fatal(err)
	}

	// 2. TryAcquire on the held key: busy.
	tryCtx, try := h.tracer.Start(bg, "try")
	if _, err := l2.TryAcquire(tryCtx, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held key: %v", err)
	}
	try.End()

	// 3. A waiting Acquire that times out: contended at least once.
	toCtx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	if _, err := l2.Acquire(toCtx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a timeout on a held key: %v", err)
	}
	cancel()
	// Step 3 may have been contended more than once (it tries again after
	// subscribing): the waiter's own contention is the next one after these.
	before := total(h.eventually(t, "the timed-out acquire's contention", func(m map[string][]point) bool {
		return total(m["distlock.acquire.contentions"]) >= 1
	})["distlock.acquire.contentions"])

	// 4. A waiter that gets the key when it is released.
	waitCtx, wait := h.tracer.Start(bg, "wait")
	got := make(chan *distlock.Lease, 1)
	go func() {
		ls, err := l2.Acquire(waitCtx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	h.eventually(t, "the waiter's contention", func(m map[string][]point) bool {
		return total(m["distlock.acquire.contentions"]) > before
	})
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
	job.End()
	waiter := <-got
	if waiter == nil {
		t.FailNow()
	}

	// 5. The server drops the waiter's lock: lost.
	if !store.ForceExpire("k") {
		t.Fatal("ForceExpire: key not held")
	}
	select {
	case <-waiter.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not lost after ForceExpire")
	}
	if !errors.Is(waiter.Err(), distlock.ErrLeaseLost) {
		t.Fatalf("waiter ended with %v, want ErrLeaseLost", waiter.Err())
	}

	// 6. A refresh that fails with a server error, then one that works.
	fb := &flaky{Backend: memory.NewBackend(store)}
	l3, err := distlock.New(fb, distlock.WithObserver(h.obs), distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	rlease, err := l3.Acquire(bg, "r")
	if err != nil {
		t.Fatal(err)
	}
	refCtx, ref := h.tracer.Start(bg, "refresh")
	fb.fail.Store(true)
	if err := rlease.Refresh(refCtx); !errors.Is(err, errFlaky) {
		t.Fatalf("Refresh with an injected failure: %v", err)
	}
	fb.fail.Store(false)
	if err := rlease.Refresh(refCtx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	ref.End()
	if err := rlease.Release(bg); err != nil {
		t.Fatal(err)
	}

	m := h.eventually(t, "the lost lease", func(m map[string][]point) bool {
		return total(m["distlock.lease.lost"]) >= 1
	})
	wait.End()

	mem := AttrBackend.String("memory")
	outcomeIs := func(s string) attribute.KeyValue { return AttrOutcome.String(s) }
	checks := []struct {
		metric string
		want   []attribute.KeyValue
		n      int64
	}{
		{"distlock.acquire.duration", []attribute.KeyValue{mem, outcomeIs(OutcomeAcquired)}, 3},
		{"distlock.acquire.duration", []attribute.KeyValue{mem, outcomeIs(OutcomeBusy)}, 1},
		{"distlock.acquire.duration", []attribute.KeyValue{mem, outcomeIs(OutcomeTimeout)}, 1},
		{"distlock.acquire.duration", nil, 5},
		{"distlock.refresh.failures", []attribute.KeyValue{mem}, 1},
		{"distlock.refresh.duration", []attribute.KeyValue{mem}, 1},
		{"distlock.lease.lost", []attribute.KeyValue{mem}, 1},
		{"distlock.lease.duration", []attribute.KeyValue{mem, outcomeIs(OutcomeReleased)}, 2},
		{"distlock.lease.duration", []attribute.KeyValue{mem, outcomeIs(OutcomeLost)}, 1},
	}
	for _, c := range checks {
		if got := total(m[c.metric], c.want...); got != c.n {
			t.Errorf("%s %v: %d, want %d", c.metric, c.want, got, c.n)
		}
	}
	if got := total(m["distlock.acquire.contentions"], mem); got < 2 {
		t.Errorf("contentions: %d, want >= 2", got)
	}
	for name, points := range m {
		for _, p := range points {
			if _, has := p.attrs.Value(AttrKey); has {
				t.Errorf("%s carries %s without WithKeyAttribute", name, AttrKey)
			}
		}
	}
	for _, p := range m["distlock.acquire.duration"] {
		if p.sum < 0 || p.sum > 60 {
			t.Errorf("acquire duration sum %v s is not a plausible number of seconds", p.sum)
		}
	}

	// Span events.
	wantEvents := map[string][]string{
		"job":     {"distlock.acquired", "distlock.released"},
		"try":     {"distlock.acquire_failed"},
		"refresh": {"distlock.refresh_failed"},
	}
	for span, want := range wantEvents {
		if got := eventNames(spanByName(t, h, span)); !slices.Equal(got, want) {
			t.Errorf("span %q events %v, want %v", span, got, want)
		}
	}
	w := eventNames(spanByName(t, h, "wait"))
	if len(w) < 3 || w[0] != "distlock.contended" || w[len(w)-2] != "distlock.acquired" || w[len(w)-1] != "distlock.lost" {
		t.Errorf("span wait events %v, want contended…, acquired, lost", w)
	}
	job1 := spanByName(t, h, "job")
	if v, _ := eventAttr(job1, "distlock.acquired", AttrToken); v.AsInt64() != int64(lease.Token()) {
		t.Errorf("job acquired token %v, want %d", v.String(), lease.Token())
	}
	if v, _ := eventAttr(job1, "distlock.released", AttrKey); v.AsString() != "k" {
		t.Errorf("job released key %q, want k", v.String())
	}
	if v, _ := eventAttr(spanByName(t, h, "try"), "distlock.acquire_failed", AttrOutcome); v.AsString() != OutcomeBusy {
		t.Errorf("try outcome %q, want busy", v.String())
	}
	if v, _ := eventAttr(spanByName(t, h, "wait"), "distlock.lost", AttrToken); v.AsInt64() != int64(waiter.Token()) {
		t.Errorf("wait lost token %v, want %d", v.String(), waiter.Token())
	}

	if n := len(h.obs.spans); n != 0 {
		t.Errorf("%d lease spans still tracked after every lease ended", n)
	}
}

// TestDo checks that Do's acquire and release land on the span around Do.
func TestDo(t *testing.T) {
	h := newHarness(t)
	l, err := memory.New(distlock.WithObserver(h.obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, span := h.tracer.Start(context.Background(), "do")
	if err := l.Do(ctx, "job", func(context.Context, *distlock.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	span.End()
	if got, want := eventNames(spanByName(t, h, "do")), []string{"distlock.acquired", "distlock.released"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestKeyAttribute(t *testing.T) {
	group := func(key string) string {
		if key == "secret" {
			return ""
		}
		return "job"
	}
	h := newHarness(t, WithKeyAttribute(group), WithSpanEvents(false))
	l, err := memory.New(distlock.WithObserver(h.obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, span := h.tracer.Start(context.Background(), "s")
	for _, k := range []string{"job:1", "job:2", "secret"} {
		ls, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	span.End()
	m := h.collect(t)
	if got := total(m["distlock.acquire.duration"], AttrKey.String("job")); got != 2 {
		t.Errorf("acquires with key=job: %d, want 2", got)
	}
	if got := total(m["distlock.acquire.duration"]); got != 3 {
		t.Errorf("acquires: %d, want 3", got)
	}
	if n := len(spanByName(t, h, "s").Events()); n != 0 {
		t.Errorf("%d span events with WithSpanEvents(false)", n)
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"nil meter provider": WithMeterProvider(nil),
		"nil key function":   WithKeyAttribute(nil),
	} {
		if _, err := New(opt); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := New(); err != nil {
		t.Errorf("New with the global provider: %v", err)
	}
}

// TestSpanTracking covers a lease lost before its acquire was reported, and
// two live leases with the same backend, key and token.
func TestSpanTracking(t *testing.T) {
	h := newHarness(t)
	ctx, span := h.tracer.Start(context.Background(), "s")
	e := distlock.Event{Backend: "memory", Key: "k", Token: 7}
	with := func(k distlock.EventKind) distlock.Event { e := e; e.Kind = k; return e }

	h.obs.Observe(context.Background(), with(distlock.EventLost))
	h.obs.Observe(ctx, with(distlock.EventAcquired))
	if n := len(h.obs.spans); n != 0 {
		t.Errorf("end-before-acquire left %d entries", n)
	}

	// Two leases share an ID: neither end event can be attributed.
	h.obs.Observe(ctx, with(distlock.EventAcquired))
	h.obs.Observe(context.Background(), with(distlock.EventAcquired))
	h.obs.Observe(context.Background(), with(distlock.EventReleased))
	h.obs.Observe(context.Background(), with(distlock.EventReleased))
	if n := len(h.obs.spans); n != 0 {
		t.Errorf("shared IDs left %d entries", n)
	}
	span.End()
	want := []string{"distlock.acquired", "distlock.acquired"}
	if got := eventNames(spanByName(t, h, "s")); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}
