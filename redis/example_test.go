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

// The Redis keys behind a lease, for monitoring or debugging: Lease.As
// fills in a Keys (for a lease of package redlock too). (No Output: it
// needs a server.)
func ExampleKeys() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redis.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "job/7", distlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	var k redis.Keys
	if lease.As(&k) {
		fmt.Println("lock", k.Lock, "expires in", client.PTTL(ctx, k.Lock).Val())
		fmt.Println("token counter", k.Counter, "=", client.Get(ctx, k.Counter).Val())
	}
}

// Waiters that race at every release, as with bsm/redislock, where the
// order of hand-off does not matter: every Locker of the key gets the
// option. By default waiters queue in the order they came. (No Output: it
// needs a server.)
func ExampleWithoutFairQueue() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "redis://localhost:6379/0?fair=false") // or redis.WithoutFairQueue()
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lease, err := locker.Acquire(wctx, "cache-rebuild") // races the other waiters at each release
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
}
