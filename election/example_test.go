package election_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	_ "github.com/distlock/distlock/memory" // registers mem://; any backend URL works the same
)

// Two processes (here two Lockers on one in-process store) campaign for the
// "scheduler" role; an observer follows the leader. When the leader
// resigns, the waiting candidate is elected with a larger token.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, _ := distlock.Open(ctx, "mem://example-election")
	b, _ := distlock.Open(ctx, "mem://example-election")
	defer a.Close()
	defer b.Close()

	ea, _ := election.New(a, "scheduler")
	eb, _ := election.New(b, "scheduler")
	leaders, _ := eb.Observe(ctx) // every new leader, in term order

	term, err := ea.Campaign(ctx, "host-a:8080") // waits until elected
	if err != nil {
		panic(err)
	}
	fmt.Println("a leads")
	fmt.Println("observed:", (<-leaders).Value)
	// While leading: run the job until term.Done() closes, and write
	// through fencing.WithGuard(ctx, pool, "scheduler", term.Fence(), …)
	// so a leader that lost its term unawares is refused.

	elected := make(chan *election.Term)
	go func() {
		t, err := eb.Campaign(ctx, "host-b:8080") // waits while a leads
		if err != nil {
			panic(err)
		}
		elected <- t
	}()
	if err := term.Resign(ctx); err != nil {
		panic(err)
	}
	<-term.Done()
	fmt.Println("a's term ended:", term.Err())

	next := <-elected
	fmt.Println("b leads, with a larger token:", next.Token() > term.Token())
	fmt.Println("observed:", (<-leaders).Value)
	now, _ := ea.Leader(ctx)
	fmt.Println("leader:", now.Value, now.Token == next.Token())
	// Output:
	// a leads
	// observed: host-a:8080
	// a's term ended: distlock: lease released
	// b leads, with a larger token: true
	// observed: host-b:8080
	// leader: host-b:8080 true
}
