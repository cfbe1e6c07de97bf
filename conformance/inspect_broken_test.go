package conformance_test

import (
	"context"

	"sync"

	"github.com/distlock/distlock/driver"
)

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
	h, err := b.Backend.Inspect(ctx, key)
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
	h, err := b.Backend.Inspect(ctx, key)
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
	h, err := b.Backend.Inspect(ctx, key)
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
	h, err := b.Backend.Inspect(ctx, key)
	if len(h.Value) > 255 {
		h.Value = h.Value[:255]
	}
	return h, err
}

// silentWatch claims to push changes but never does.
type silentWatch struct{ driver.Backend }

func (b silentWatch) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	return b.Backend.Inspect(ctx, key)
}

func (silentWatch) Watch(context.Context, string) (driver.Subscription, error) {
	return silence{}, nil
}

type silence struct{}

func (silence) Wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (silence) Close() error                   { return nil }
