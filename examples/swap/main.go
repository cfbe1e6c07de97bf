// Command swap runs the same locking code on whichever backend a URL names:
// several workers, each with its own Locker as separate replicas would have,
// take turns on one key with Locker.Do and check that they never overlap and
// that every holder's fencing token is larger than the last.
//
//	go run ./examples/swap                                  # mem://
//	go run ./examples/swap -url redis://127.0.0.1:6379
//	DISTLOCK_URL=etcd://127.0.0.1:2379 go run ./examples/swap
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "swap:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("swap", flag.ContinueOnError)
	url := fs.String("url", envOr("DISTLOCK_URL", "mem://"), "backend URL (default $DISTLOCK_URL, else mem://)")
	workers := fs.Int("workers", 4, "workers, each with its own Locker")
	rounds := fs.Int("rounds", 5, "critical sections per worker")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 1 || *rounds < 1 {
		return errors.New("-workers and -rounds must be at least 1")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	fmt.Fprintf(out, "backend: %s\n", *url)
	var (
		inside  atomic.Int32
		mu      sync.Mutex
		last    distlock.Token
		entries int
	)
	errs := make(chan error, *workers)
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		locker, err := distlock.Open(ctx, *url, distlock.WithTTL(5*time.Second))
		if err != nil {
			return err
		}
		defer locker.Close()
		if w == 0 {
			g := locker.Guarantees()
			fmt.Fprintf(out, "guarantees: token from %s; wait by %s; FIFO %v\n", g.TokenSource, g.Wait, g.FIFO)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < *rounds; r++ {
				err := locker.Do(ctx, "swap-demo", func(ctx context.Context, l *distlock.Lease) error {
					if inside.Add(1) != 1 {
						return errors.New("two holders at once")
					}
					defer inside.Add(-1)
					mu.Lock()
					defer mu.Unlock()
					if l.Token() <= last {
						return fmt.Errorf("token %d after %d", l.Token(), last)
					}
					last = l.Token()
					entries++
					fmt.Fprintf(out, "worker %d holds %q with token %d\n", w, l.Key(), l.Token())
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Fprintf(out, "ok: %d critical sections, never overlapping, tokens strictly increasing\n", entries)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
