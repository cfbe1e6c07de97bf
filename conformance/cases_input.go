package conformance

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

func invalidKey(e *env) {
	l := e.locker()
	ctx, cancel := e.timeout(5 * time.Second)
	defer cancel()
	bad := map[string]string{
		"empty":     "",
		"oversized": strings.Repeat("k", distlock.MaxKeyLen+1),
		"non-UTF-8": "bad\xff",
		"NUL":       "a\x00b",
		"newline":   "a\nb",
	}
	for what, key := range bad {
		if _, err := l.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) || !errors.Is(err, distlock.ErrInvalid) {
			e.fail("TryAcquire with a %s key: want ErrInvalidKey, got %v", what, err)
		}
		if _, err := l.Acquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Acquire with a %s key: want ErrInvalidKey, got %v", what, err)
		}
		if err := l.Do(ctx, key, func(context.Context, *distlock.Lease) error { return nil }); !errors.Is(err, distlock.ErrInvalidKey) {
			e.fail("Do with a %s key: want ErrInvalidKey, got %v", what, err)
		}
	}
}

func invalidTTL(e *env) {
	l := e.locker()
	ctx, cancel := e.timeout(5 * time.Second)
	defer cancel()
	for _, ttl := range []time.Duration{0, -time.Second, distlock.MaxTTL + time.Hour} {
		if _, err := l.TryAcquire(ctx, e.key("k"), distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) || !errors.Is(err, distlock.ErrInvalid) {
			e.fail("TryAcquire with TTL %v: want ErrInvalidTTL, got %v", ttl, err)
		}
		if _, err := l.Acquire(ctx, e.key("k"), distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			e.fail("Acquire with TTL %v: want ErrInvalidTTL, got %v", ttl, err)
		}
	}
}
