package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memory" // registers mem://
)

// The backend is configuration: the same code runs on "redis://…",
// "etcd://…" or "zk://…" once the backend package is imported (package
// all imports every one).
func ExampleOpen() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "mem://example-open?ttl=10s")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	// The token fences what the lease protects (see package fencing);
	// mem:// tokens start from the wall clock in µs.
	fmt.Println("holding", lease.Key(), "with a token:", lease.Token() > 0)
	// Output: holding invoices with a token: true
}

// Do is what most code wants: the lease is renewed while fn runs, fn's
// context is cancelled if the lock is lost, and the lock is released after.
func ExampleLocker_Do() {
	ctx := context.Background()
	locker, _ := distlock.Open(ctx, "mem://example-do")
	defer locker.Close()

	err := locker.Do(ctx, "nightly-report", func(ctx context.Context, lease *distlock.Lease) error {
		// Pass lease.Token() to whatever you write, so it can refuse a
		// stale holder (see package fencing).
		fmt.Println("running, fenced:", lease.Fence().Token > 0)
		return nil
	}, distlock.WithTTL(15*time.Second))
	fmt.Println("err:", err)
	// Output:
	// running, fenced: true
	// err: <nil>
}

// TryAcquire does not wait: it reports ErrNotAcquired when someone holds
// the key.
func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	a, _ := distlock.Open(ctx, "mem://example-try")
	b, _ := distlock.Open(ctx, "mem://example-try")
	defer a.Close()
	defer b.Close()

	held, _ := a.TryAcquire(ctx, "cron:cleanup")
	_, err := b.TryAcquire(ctx, "cron:cleanup")
	fmt.Println(errors.Is(err, distlock.ErrNotAcquired), held.Err() == nil)
	// Output: true true
}

// Done closes when the lease ends; Err says whether it was released or lost.
func ExampleLease_Done() {
	ctx := context.Background()
	locker, _ := distlock.Open(ctx, "mem://example-done")
	defer locker.Close()

	lease, _ := locker.Acquire(ctx, "k", distlock.WithTTL(50*time.Millisecond))
	<-lease.Done() // nobody refreshed it
	fmt.Println(errors.Is(lease.Err(), distlock.ErrLeaseLost))
	// Output: true
}

// Inspect reads a key's lock without taking it: whether it is held, the
// holder's value (WithValue), token and remaining TTL as the server counts
// it. It may be out of date as soon as it returns: decide nothing on it
// that a fencing token should decide.
func ExampleLocker_Inspect() {
	ctx := context.Background()
	locker, _ := distlock.Open(ctx, "mem://example-inspect")
	defer locker.Close()

	lease, _ := locker.Acquire(ctx, "invoices", distlock.WithValue("worker-7 (10.0.0.7)"), distlock.WithTTL(time.Hour))
	h, _ := locker.Inspect(ctx, "invoices")
	fmt.Printf("held: %v, by %s, the lease's token: %v, about %v left\n", h.Held, h.Value, h.Token == lease.Token(), h.TTL.Round(time.Minute))
	fmt.Println("waiters:", h.Waiters) // -1: this backend keeps no queue (etcd and ZooKeeper do)

	_ = lease.Release(ctx)
	h, _ = locker.Inspect(ctx, "invoices")
	fmt.Printf("held: %v, value %q, token %d\n", h.Held, h.Value, h.Token)
	// Output:
	// held: true, by worker-7 (10.0.0.7), the lease's token: true, about 1h0m0s left
	// waiters: -1
	// held: false, value "", token 0
}
