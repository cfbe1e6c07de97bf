package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redis"
)

// A Locker on an existing go-redis client. (No Output: it needs a server.)
func ExampleNew() {
	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redis.New(client, redis.WithKeyPrefix("billing:"), distlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	err = locker.Do(context.Background(), "invoice/42", func(ctx context.Context, lease *distlock.Lease) error {
		// Pass lease.Token() to the resource, which refuses older tokens.
		fmt.Println("holding with token", lease.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A Locker from a URL; the blank import of this package registers the
// scheme.
func Example_open() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "redis://localhost:6379/0?ttl=15s&prefix=app:&eviction=refuse")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err) // errors.Is(err, distlock.ErrNotAcquired) when held
	}
	defer lease.Release(ctx)
}

// The node-level surface, as a multi-node backend uses it: one script run
// per call on one server.
func ExampleAcquireOn() {
	ctx := context.Background()
	node := goredis.NewClient(&goredis.Options{Addr: "localhost:6379"})
	defer node.Close()
	k := redis.KeysFor(redis.DefaultPrefix, "job/7")
	const owner = "3f2a…random per lease"
	r, err := redis.AcquireOn(ctx, node, k, owner, 30*time.Second)
	switch {
	case err != nil:
		log.Fatal(err)
	case !r.Acquired:
		fmt.Println("held; expires in", r.HolderTTL)
		return
	}
	fmt.Println("token", r.Token)
	if _, err := redis.ReleaseOn(ctx, node, k, owner, 0); err != nil {
		log.Fatal(err)
	}
}
