package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redlock"
)

// A Locker over five independent Redis nodes. (No Output: it needs servers.)
func ExampleNew() {
	var nodes []goredis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
		nodes = append(nodes, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	locker, err := redlock.New(nodes, redlock.WithCloseClients(true), distlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = locker.Do(ctx, "invoices/2026-11", func(ctx context.Context, lease *distlock.Lease) error {
		// Pass lease.Token() to the resource so it can reject stale holders.
		fmt.Println("holding with token", lease.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The same through a URL. (No Output: it needs servers.)
func Example_open() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?prefix=app:&node_timeout=30ms&ttl=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
}
