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
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/all"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // -h: the usage is printed
	case errors.Is(err, errUsage): // the flag package printed what is wrong
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "swap:", err)
		os.Exit(1)
	}
}

// errUsage is a flag error, printed with the usage by the flag package.
var errUsage = errors.New("bad usage")

// lockURL is the backend URL: the -url flag, else $DISTLOCK_URL, else mem://.
func lockURL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := os.Getenv("DISTLOCK_URL"); v != "" {
		return v
	}
	return "mem://"
}

// urlUsage is the -url flag's help.
const urlUsage = "backend URL, e.g. redis://127.0.0.1:6379, etcd://127.0.0.1:2379, zk://127.0.0.1:2181/locks;\n" +
	"empty: $DISTLOCK_URL, else mem:// (in-process: fine for this demo, whose workers share one process;\n" +
	"across processes it excludes nothing)"

// run parses args, writes the story to out and flag errors and the usage
// to errOut.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("swap", flag.ContinueOnError)
	fs.SetOutput(errOut)
	url := fs.String("url", "", urlUsage)
	workers := fs.Int("workers", 4, "workers, each with its own Locker")
	rounds := fs.Int("rounds", 5, "critical sections per worker")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	*url = lockURL(*url)
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
