package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// rampDelay raises the partition's reply delay to d in steps of a twelfth
// of the session timeout T, a third of T apart, so that no gap between two
// replies reaches go-zookeeper's read timeout (2T/3) on the way. It stops
// early, returning false, if lease ends.
func rampDelay(p *partition, lease *distlock.Lease, T, d time.Duration) bool {
	for step := T / 12; step <= d; step += T / 12 {
		p.setDelay(step)
		select {
		case <-lease.Done():
			return false
		case <-time.After(T / 3):
		}
	}
	return true
}

// TestLossNoticeSlowReplies: the link's replies come late, then the
// client→server direction goes silent while the replies under way still
// arrive, late. The server last heard from the holder at the fault; its
// last reply arrives a delay d after the request behind it was sent.
//
// Dial's silence bound counts from that request's send time, so the reply
// delay costs it nothing: the loss is reported 2T/3 after the server last
// heard from the holder at the latest. New's only signal is go-zookeeper's
// disconnect event, 2T/3 after the last reply arrived: it is ahead of the
// server only while d stays under T/3 minus the grace, as
// docs/backends/zookeeper.md says. (With d = T/2 New's notice comes at
// fault + T/2 + 2T/3, after the server can expire the session. That case is
// the documented limit and is not run: with replies that slow the lock may
// be handed over first.)
//
// Past T/3 Dial cannot keep a lease (DialAboveThird): the newest answered
// request is T/3 + d old just before the next ping's reply, so the silence
// bound reports the loss, early, while the session lives.
func TestLossNoticeSlowReplies(t *testing.T) {
	const T = 3 * time.Second
	srv := testserver.ZooKeeper(t, testserver.WithZKMaxSessionTimeout(T))

	for _, tc := range []struct {
		name  string
		dial  bool
		delay time.Duration
	}{
		// T/6: the silence bound's own margin against a spurious loss on
		// the slow link is still T/6.
		{"Dial", true, T / 6},
		// T/12, under T/3 minus a grace of zero, leaves New T/4 ahead.
		{"New", false, T / 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, 40*time.Second)
			p := newPartition(t, srv.Addr())
			var a distlock.Locker
			var err error
			if tc.dial {
				a, err = Dial(ctx, []string{p.addr()}, WithSessionTimeout(T))
			} else {
				conn, events, cerr := zk.Connect([]string{p.addr()}, T, zk.WithLogger(nopLogger{}))
				if cerr != nil {
					t.Fatal(cerr)
				}
				t.Cleanup(conn.Close)
				a, err = New(conn, WithEvents(events), WithSessionTimeout(T)) // grace: default 0
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			b, err := Dial(ctx, []string{srv.Addr()}, WithSessionTimeout(T))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			admin := adminConn(t, srv.Addr())

			key := "slow-" + tc.name
			var held *distlock.Lease
			waitFor(t, "A to take the key", func() bool {
				held, err = a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
				return err == nil
			})
			lost := lossTimes(ctx, []*distlock.Lease{held})
			got := acquireAsync(ctx, b, key)
			waitFor(t, "B to queue", func() bool { return len(children(t, admin, key)) == 2 })

			ok := rampDelay(p, held, T, tc.delay)
			if ok {
				select { // pings answered late, in steady state
				case <-held.Done():
					ok = false
				case <-time.After(T / 2):
				}
			}
			if !ok {
				t.Skipf("the slow link alone ended the lease (%v), the loss reported early: no takeover to race", held.Err())
			}
			fault := time.Now()
			p.set(true, false)
			checkNoticeFirst(t, ctx, fault, []*distlock.Lease{held}, lost, got)
		})
	}

	t.Run("DialAboveThird", func(t *testing.T) {
		ctx := ctxFor(t, 40*time.Second)
		p := newPartition(t, srv.Addr())
		a, err := Dial(ctx, []string{p.addr()}, WithSessionTimeout(T))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		ab := backendOf(t, a)
		sid := ab.sessionID()
		held, err := a.TryAcquire(ctx, "slow-above-third", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if rampDelay(p, held, T, T/2) {
			select {
			case <-held.Done():
			case <-time.After(2 * T):
				t.Fatalf("the lease stayed open for %v on a link whose replies take %v", 2*T, T/2)
			}
		}
		if !errors.Is(held.Err(), distlock.ErrLeaseLost) {
			t.Fatalf("Err() = %v, want ErrLeaseLost", held.Err())
		}
		// Early: the session outlives the notice. Once the link is fast
		// again the janitor deletes the lost lease's znode, and the key can
		// be taken again in the same session.
		p.setDelay(0)
		var again *distlock.Lease
		waitFor(t, "A to take the key again", func() bool {
			again, err = a.TryAcquire(ctx, "slow-above-third", distlock.WithTTL(time.Minute))
			return err == nil
		})
		defer again.Release(ctx)
		if got := ab.sessionID(); got != sid {
			t.Fatalf("session %#x expired (now %#x): the slow link alone must not cost the session", sid, got)
		}
		if again.Token() <= held.Token() {
			t.Fatalf("token %d after %d", again.Token(), held.Token())
		}
	})
}
