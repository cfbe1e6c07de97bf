package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testserver"
)

// The node calls of a round share one deadline (fanOut). A call that ends
// must not cut the others short: here node 0's call waits in its client's
// pool (one connection, busy with a BLPOP) while the other four answer at
// once. go-redis's pool wait is where a cancelled context shows; a shared
// context freed by the first call to end fails this with context.Canceled.
func TestFanOutCallsOutliveTheFirstToEnd(t *testing.T) {
	srvs := testserver.RedisN(t, 5)
	clients := make([]goredis.UniversalClient, len(srvs))
	for i, s := range srvs {
		o := &goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}
		if i == 0 {
			o.PoolSize, o.PoolTimeout = 1, 10*time.Second
		}
		clients[i] = goredis.NewClient(o)
	}
	b, err := newBackend(clients, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		for _, c := range clients {
			_ = c.Close()
		}
	})
	ctx := t.Context()
	for _, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	busy := make(chan error, 1)
	occupy := func() { // node 0's only connection, for about 400 ms
		go func() { busy <- clients[0].BLPop(context.Background(), 400*time.Millisecond, "fanout-test:none").Err() }()
		time.Sleep(50 * time.Millisecond)
	}

	// The pool wait does end on a cancelled context: otherwise this test
	// could not fail.
	occupy()
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := clients[0].Ping(cctx).Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a pool wait under a cancelled context ended with %v, want context.Canceled", err)
	}
	<-busy

	occupy()
	var mu sync.Mutex
	errs, took := map[int]error{}, map[int]time.Duration{}
	var ctxs []context.Context
	ch := b.fanOut(ctx, b.all(), 2*time.Second, func(ctx context.Context, i int, c goredis.UniversalClient) (bool, error) {
		began := time.Now()
		err := c.Ping(ctx).Err()
		mu.Lock()
		defer mu.Unlock()
		errs[i], took[i] = err, time.Since(began)
		ctxs = append(ctxs, ctx)
		return err == nil, err
	})
	for range srvs {
		<-ch
	}
	<-busy
	mu.Lock()
	defer mu.Unlock()
	for i := range srvs {
		if errs[i] != nil {
			t.Errorf("node %d: %v after %v", i, errs[i], took[i])
		}
	}
	if errs[0] == nil && took[0] < 250*time.Millisecond {
		t.Errorf("node 0 answered after %v: it did not wait in its pool, so nothing was tested", took[0])
	}
	for _, c := range ctxs {
		if c.Err() == nil {
			t.Error("the round's context is still live after every call ended")
		}
	}
}
