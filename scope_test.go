package distlock_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// An option the compiler cannot keep out (a backend's, or a portable one
// given to a raw backend) is refused at run time, never ignored.
func TestOptionWhereItDoesNotApply(t *testing.T) {
	// Nothing listens there: every case must fail before any round trip.
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	// Three servers: one client given thrice would be refused for that.
	clients := []goredis.UniversalClient{client}
	for _, addr := range []string{"127.0.0.1:2", "127.0.0.1:3"} {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		clients = append(clients, c)
	}

	cases := map[string]func() error{
		// The backend is built already: its option would be dropped.
		"distlock.New(memory backend, memory.WithStore)": func() error {
			l, err := distlock.New(memory.NewBackend(memory.NewStore()), memory.WithStore(memory.NewStore()))
			closeIf(l)
			return err
		},
		"distlock.New(memory backend, redis.WithKeyPrefix)": func() error {
			l, err := distlock.New(memory.NewBackend(memory.NewStore()), redis.WithKeyPrefix("x:"))
			closeIf(l)
			return err
		},
		"memory.New(redis.WithKeyPrefix)": func() error {
			l, err := memory.New(redis.WithKeyPrefix("x:"))
			closeIf(l)
			return err
		},
		// A raw backend cannot apply a portable setting.
		"redis.NewBackend(WithTTL)": func() error {
			b, err := redis.NewBackend(client, distlock.WithTTL(time.Second))
			if b != nil {
				b.Close()
			}
			return err
		},
		"redis.NewBackend(WithReleaseTimeout)": func() error {
			b, err := redis.NewBackend(client, distlock.WithReleaseTimeout(time.Second))
			if b != nil {
				b.Close()
			}
			return err
		},
		"redlock.NewBackend(WithDrift)": func() error {
			b, err := redlock.NewBackend(clients, distlock.WithDrift(0.1, time.Millisecond))
			if b != nil {
				b.Close()
			}
			return err
		},
		"redlock.NewBackend(redis.WithKeyPrefix)": func() error {
			b, err := redlock.NewBackend(clients, redis.WithKeyPrefix("x:"))
			if b != nil {
				b.Close()
			}
			return err
		},
		"redis.New(redlock.WithNodeTimeout)": func() error {
			l, err := redis.New(client, redlock.WithNodeTimeout(time.Second))
			closeIf(l)
			return err
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: want ErrInvalidOption, got %v", name, err)
		}
	}
}

// The options a backend package's New splits between its backend and the
// portable layer all take effect.
func TestBackendNewAppliesBothKinds(t *testing.T) {
	s := memory.NewStore()
	l, err := memory.New(memory.WithStore(s), distlock.WithTTL(time.Minute),
		distlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(t.Context())
	if !s.Held("k") {
		t.Error("the lock is not in the store given with WithStore")
	}
	if ls.TTL() != time.Minute {
		t.Errorf("TTL %v, want the 1m given to memory.New", ls.TTL())
	}
}

func closeIf(l distlock.Locker) {
	if l != nil {
		l.Close()
	}
}

// Each WithObserver adds an observer: a second one (a tracer beside
// metrics) does not silently replace the first.
func TestObserversAddUp(t *testing.T) {
	first, second := &recorder{}, &recorder{}
	l, err := memory.New(distlock.WithObserver(first), distlock.WithObserver(second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(t.Context())
	for name, r := range map[string]*recorder{"first": first, "second": second} {
		if r.count(distlock.EventAcquired) != 1 || r.count(distlock.EventReleased) != 1 {
			t.Errorf("the %s observer saw %d acquired and %d released, want 1 and 1",
				name, r.count(distlock.EventAcquired), r.count(distlock.EventReleased))
		}
	}
	if _, err := memory.New(distlock.WithObserver(nil)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WithObserver(nil): want ErrInvalidOption, got %v", err)
	}
}

// A nil option (a variable left unset) sets nothing, wherever it is passed.
func TestNilOptionsSetNothing(t *testing.T) {
	var (
		opt   distlock.Option
		call  distlock.CallOption
		renew distlock.RefreshOption
	)
	l, err := distlock.New(memory.NewBackend(memory.NewStore()), distlock.WithTTL(time.Minute), opt)
	if err != nil {
		t.Fatalf("New with a nil Option: %v", err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "k", call)
	if err != nil {
		t.Fatalf("TryAcquire with a nil CallOption: %v", err)
	}
	if err := ls.Refresh(t.Context(), renew); err != nil || ls.TTL() != time.Minute {
		t.Fatalf("Refresh with a nil RefreshOption: %v, TTL %v", err, ls.TTL())
	}
	ls.Release(t.Context())
	for name, open := range map[string]func() (distlock.Locker, error){
		"Open":       func() (distlock.Locker, error) { return distlock.Open(t.Context(), "mem://", opt) },
		"memory.New": func() (distlock.Locker, error) { return memory.New(opt) },
	} {
		l, err := open()
		if err != nil {
			t.Errorf("%s with a nil Option: %v", name, err)
			continue
		}
		l.Close()
	}
}
