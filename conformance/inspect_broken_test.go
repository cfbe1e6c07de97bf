package conformance_test

import (
	"context"

	"sync"

	"github.com/distlock/distlock/driver"
)

// inspectable gives a wrapped backend the Inspect and Watch of the
// Crashable under it, unless the wrapper has its own (a broken one): the
// wrappers embed driver.Backend, which hides the optional interfaces.
func inspectable(b driver.Backend, under driver.Backend) driver.Backend {
	if _, ok := b.(driver.Inspector); ok {
		return b
	}
	return withInspect{Backend: b, under: under}
}

type withInspect struct {
	driver.Backend
	under driver.Backend
}

func (w withInspect) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	return w.under.(driver.Inspector).Inspect(ctx, key)
}

func (w withInspect) Watch(ctx context.Context, key string) (driver.Subscription, error) {
	return w.under.(driver.Watcher).Watch(ctx, key)
}

func inspectOf(b driver.Backend, ctx context.Context, key string) (driver.Holder, error) {
	return b.(driver.Inspector).Inspect(ctx, key)
}

// staleValue reports the last value it saw on a key when the holder gave
// none: a leftover of the previous holder.
type staleValue struct {
	driver.Backend
	left *leftovers
}

// leftovers are the values a staleValue server kept.
type leftovers struct {
	mu   sync.Mutex
	last map[string]string
}

func (b staleValue) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.TryLock(ctx, req)
	if err == nil && req.Value != "" {
		b.left.mu.Lock()
		b.left.last[req.Key] = req.Value
		b.left.mu.Unlock()
	}
	return g, err
}

func (b staleValue) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := inspectOf(b.Backend, ctx, key)
	b.left.mu.Lock()
	defer b.left.mu.Unlock()
	if h.Held && h.Value == "" {
		h.Value = b.left.last[key]
	}
	return h, err
}

// offByOneToken reports the holder's token plus one.
type offByOneToken struct{ driver.Backend }

func (b offByOneToken) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := inspectOf(b.Backend, ctx, key)
	if h.Held {
		h.Token++
	}
	return h, err
}

// stickyHolder keeps reporting the first holder it saw of a key.
type stickyHolder struct {
	driver.Backend
	mu    sync.Mutex
	first map[string]driver.Holder
}

func (b *stickyHolder) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := inspectOf(b.Backend, ctx, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.first == nil {
		b.first = map[string]driver.Holder{}
	}
	if f, ok := b.first[key]; ok {
		return f, err
	}
	if h.Held {
		b.first[key] = h
	}
	return h, err
}

// truncatesValue keeps only the first 255 bytes of a value.
type truncatesValue struct{ driver.Backend }

func (b truncatesValue) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	h, err := inspectOf(b.Backend, ctx, key)
	if len(h.Value) > 255 {
		h.Value = h.Value[:255]
	}
	return h, err
}

// silentWatch claims to push changes but never does.
type silentWatch struct{ driver.Backend }

func (b silentWatch) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	return inspectOf(b.Backend, ctx, key)
}

func (silentWatch) Watch(context.Context, string) (driver.Subscription, error) {
	return silence{}, nil
}

type silence struct{}

func (silence) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (silence) Close() error                   { return nil }
