package distlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memory"
)

// scripted is a backend whose Inspect answers from a script, one entry a
// call, then repeats the last: what a server shows of a key over time.
type scripted struct {
	driver.Backend
	mu     sync.Mutex
	script []driver.Holder
}

func (s *scripted) Inspect(context.Context, string) (driver.Holder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.script[0]
	if len(s.script) > 1 {
		s.script = s.script[1:]
	}
	return h, nil
}

// Watch is unsupported: the memory server's notices know nothing of the
// script, so Watch polls Inspect.
func (s *scripted) Watch(context.Context, string) (driver.Subscription, error) {
	return nil, driver.ErrUnsupported
}

func held(token int64, value string) driver.Holder {
	return driver.Holder{Held: true, Token: token, Value: value, TTL: time.Minute, Waiters: -1}
}

// Watch reports a holder only when its token is larger than every token it
// reported before: an earlier holder that a server shows again (after a
// restart from an older snapshot, say) is never reported, nor is the
// holder already reported seen again after a free read; the key becoming
// free still is.
func TestWatchReportsOnlyLargerTokens(t *testing.T) {
	free := driver.Holder{Waiters: -1}
	b := &scripted{Backend: memory.NewBackend(memory.NewStore()), script: []driver.Holder{
		free,
		held(5, "a"),
		held(3, "older"), // an earlier holder shown again
		held(5, "a"),
		free,
		held(4, "older still"),
		held(5, "a"), // reported already
		held(9, "b"),
		held(7, "between"),
		free,
		held(10, "c"),
	}}
	l, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch, err := l.Watch(t.Context(), "k", distlock.WithBackoff(time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	userFree := distlock.Holder{Waiters: -1}
	userHeld := func(token distlock.Token, value string) distlock.Holder {
		return distlock.Holder{Held: true, Token: token, Value: value, TTL: time.Minute, Waiters: -1}
	}
	want := []distlock.Holder{userFree, userHeld(5, "a"), userFree, userHeld(9, "b"), userFree, userHeld(10, "c")}
	var got []distlock.Holder
	for len(got) < len(want) {
		select {
		case h := <-ch:
			got = append(got, h)
		case <-time.After(10 * time.Second):
			t.Fatalf("Watch reported %+v, then nothing for 10s; want %+v", got, want)
		}
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Watch reported %+v; want %+v", got, want)
		}
	}
}
