package memory_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
)

// Many Lockers on one Store, grants far faster than one
// per µs on few keys, counters dropped and re-created at every release:
// each key's tokens strictly increase in grant order.
func TestTokensIncreaseUnderContention(t *testing.T) {
	s := memory.NewStore()
	ctx := context.Background()
	var ls []distlock.Locker
	for range 8 {
		l, err := memory.New(memory.WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	keys := []string{"a", "b", "c"}
	var mu sync.Mutex
	last := map[string]distlock.Token{}
	var wg sync.WaitGroup
	for w, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				k := keys[(w+i)%len(keys)]
				lease, err := l.TryAcquire(ctx, k)
				if err != nil {
					continue
				}
				mu.Lock() // grants of one key are serial: the key is held
				if tok := lease.Token(); tok <= last[k] {
					t.Errorf("key %s: token %d after %d", k, tok, last[k])
				}
				last[k] = lease.Token()
				mu.Unlock()
				if i%7 == 0 {
					s.ForceExpire(k)
				} else {
					_ = lease.Release(ctx)
				}
			}
		}()
	}
	wg.Wait()
}
