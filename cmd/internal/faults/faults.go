// Package faults is distlock's fault harness: it runs lock holders as
// separate worker processes against real servers, injects faults (a paused
// holder, a paused, killed or lost server, a blackholed or slow link),
// records every acquire, release and write with a CLOCK_MONOTONIC timestamp,
// and checks the history: overlapping critical sections, lost updates, and
// stale writes accepted. Each write is a read-modify-write of a counter row
// in PostgreSQL, unguarded or guarded by package fencing.
//
// A scenario is backend × fault × mode; the matrix test runs them all. Its
// negative control is the unguarded mode under a paused holder: it must show
// overlaps or lost updates, or the harness is broken. The guarded mode must
// show no stale write accepted and no lost update, under every fault.
//
// Run the long matrix (≥ 10,000 guarded operations, a table at the end) with
//
//	go test ./cmd/internal/faults -run Matrix -faults.long -v
//
// or FAULTS_LONG=1.
package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/internal/faults/history"
	"github.com/distlock/distlock/fencing"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/redis"
)

// Fault is one injected failure. Inject runs it to the end (a pause
// includes its resume) and reports what it did.
type Fault struct {
	Name string
	// Inject performs the fault on a running scenario.
	Inject func(ctx context.Context, env *Env) (Injected, error)
	// Applies says whether the fault makes sense for the target (for
	// instance, minority loss needs a cluster).
	Applies func(tg *Target) bool
	// Tolerated says whether the backend's declared guarantees claim to keep
	// mutual exclusion through this fault; if so the unguarded run must show
	// no overlap.
	Tolerated func(g distlock.Guarantees, tg *Target) bool
	// HolderPause marks the faults that stop a holder: the negative control
	// and the Done-after-resume figure apply to them.
	HolderPause bool
	// Link marks the faults that need a proxy between each worker and the
	// servers.
	Link bool
	// Supersedes marks the faults that, by design, hand the lock to a
	// second holder while the targeted lease still stands by its own clock
	// (a clock jump, which the backend declares it cannot survive). The
	// fence must then refuse the targeted holder, and any holder the
	// hand-overs after it supersede in turn: a write refused after another
	// holder was granted a larger token since its lease's grant is not
	// counted as a legitimate write rejected. Every other refusal is.
	Supersedes bool
	// Settle is the least time the scenario runs after the fault, so that
	// the backend can recover (an etcd proposal caught by a leader's death
	// fails only after etcd's request timeout, about 6 s).
	Settle time.Duration
}

// Injected is what a fault did, on the shared monotonic clock.
type Injected struct {
	Start, End int64 // when the fault began and ended (ns, CLOCK_MONOTONIC)
	Worker     int   // the paused holder, or -1
	Token      int64 // the token it held when paused
	Note       string
	// Broken names a violation the fault saw itself (e.g. a token that
	// did not increase); the scenario fails on it.
	Broken string
}

func always(*Target) bool                     { return true }
func never(distlock.Guarantees, *Target) bool { return false }
func clusterOnly(tg *Target) bool             { return len(tg.Servers) >= 3 }
func proxied(tg *Target) bool                 { return tg.proxyable }
func toleratesMinority(g distlock.Guarantees, tg *Target) bool {
	return g.FailuresTolerated >= minority(len(tg.Servers))
}

// minority is how many of n nodes the harness takes away: (n−1)/2.
func minority(n int) int { return (n - 1) / 2 }

// PauseHolder stops the current lock holder with SIGSTOP for d (longer than
// the TTL), then continues it with SIGCONT — a GC pause that outlasts the
// lease, renewal included. The holder is caught right after its acquire,
// before it touches the database.
func PauseHolder(d time.Duration) Fault {
	return Fault{
		Name: "pause-holder", Applies: always, Tolerated: never, HolderPause: true,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			var in Injected
			for try := 0; ; try++ {
				w, tok, err := env.waitHolder(ctx)
				if err != nil {
					return Injected{}, err
				}
				in = Injected{Worker: w.ID, Token: tok, Start: Mono()}
				if err := syscall.Kill(w.pid, syscall.SIGSTOP); err != nil {
					return in, fmt.Errorf("SIGSTOP worker %d: %w", w.ID, err)
				}
				// Caught before its database work? A holder stopped inside
				// its guarded transaction holds the fence row, and the next
				// holder's guard just waits: nothing to reject.
				if readStatus(w.status) == tok || try == 20 {
					break
				}
				_ = syscall.Kill(w.pid, syscall.SIGCONT)
			}
			w := env.Workers[in.Worker]
			sleep(ctx, d)
			in.End = Mono() // before the signal: the worker may log its loss at once
			err := syscall.Kill(w.pid, syscall.SIGCONT)
			return in, err
		},
	}
}

// PauseServer stops the server (the leader of a cluster) and its child
// processes with SIGSTOP for d, then continues them. Clients see silence,
// not errors; no backend declares anything about it, so only the guarded
// invariants are asserted.
func PauseServer(d time.Duration) Fault {
	return Fault{
		Name: "pause-server", Applies: always, Tolerated: never,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			s := env.Target.primary()
			in := Injected{Worker: -1, Start: Mono()}
			if err := s.Pause(); err != nil {
				return in, err
			}
			sleep(ctx, d)
			err := s.Resume()
			in.End = Mono()
			return in, err
		},
	}
}

// KillRestartServer kills the (primary) server with SIGKILL, keeps it down
// for down, and restarts it on its data directory.
func KillRestartServer(down time.Duration) Fault {
	return Fault{
		Name: "kill-restart-server", Applies: func(tg *Target) bool { return len(tg.Servers) == 1 },
		Tolerated: func(g distlock.Guarantees, tg *Target) bool { return !g.RestartLosesLocks },
		// Clients reconnect after the restart with a back-off of their own
		// (go-zookeeper waits a second per try with one server); a client
		// that misses its restored session's timeout gets a new session
		// only once the server expires the old one, and its znodes with
		// it. Leave a loaded host room for the first grant after that.
		Settle: 5 * time.Second,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			s := env.Target.primary()
			in := Injected{Worker: -1, Start: Mono()}
			if err := s.Kill(); err != nil {
				return in, err
			}
			sleep(ctx, down)
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			err := s.Restart(rctx)
			in.End = Mono()
			return in, err
		},
	}
}

// LoseMinority kills (n−1)/2 of n nodes — on etcd and ZooKeeper the leader
// first — and leaves them down for the rest of the scenario.
func LoseMinority() Fault {
	return Fault{
		Name: "lose-minority", Applies: clusterOnly, Tolerated: toleratesMinority, Settle: 7 * time.Second,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			tg := env.Target
			k := minority(len(tg.Servers))
			victims := make([]int, 0, k)
			if tg.Cluster != nil {
				if l, err := tg.Cluster.Leader(); err == nil {
					victims = append(victims, l)
				}
			}
			for i := 0; len(victims) < k; i++ {
				if !containsInt(victims, i) {
					victims = append(victims, i)
				}
			}
			in := Injected{Worker: -1, Start: Mono()}
			var names []string
			for _, i := range victims {
				if err := tg.Servers[i].Kill(); err != nil {
					return in, err
				}
				names = append(names, strconv.Itoa(i))
			}
			in.End = Mono()
			in.Note = "killed node(s) " + strings.Join(names, ",")
			return in, nil
		},
	}
}

// Mono returns CLOCK_MONOTONIC in nanoseconds, the clock every worker stamps
// its events with.
func Mono() int64 { return mono() }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// readStatus returns the token in a worker's status file, or 0 if it holds
// nothing.
func readStatus(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s, ok := strings.CutPrefix(string(b), "held ")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// RedlockClockJump emulates a clock jump on one node of a Redlock holder's
// majority, on three nodes. First a lock left by some other client stays on
// node 2, so the next holder gets the bare majority {0, 1}. Once it has,
// the holder is paused (SIGSTOP) for a moment well under its TTL — a short
// GC pause, harmless on its own — while node 1's clock jumps (the holder's
// key there expires early: DEL) and the stray lock on node 2 runs out
// (DEL). Nodes 1 and 2 now form a free majority: the harness itself takes
// the lock as a second client, does one read-modify-write (guarded in the
// guarded mode) and releases, and then the first holder resumes, still
// believing it holds the lock. Its token must be below the second's.
func RedlockClockJump() Fault {
	return Fault{
		Name: "redlock-clock-jump", Tolerated: never, Supersedes: true,
		Applies: func(tg *Target) bool { return strings.HasPrefix(tg.Backend, "redlock") && len(tg.Servers) == 3 },
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			k := redisnode.KeysFor(redis.DefaultPrefix, env.Key)
			var nodes []*goredis.Client
			for _, s := range env.Target.Servers {
				c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
				defer c.Close()
				nodes = append(nodes, c)
			}
			const foreign = "faults-stray-lock"
			if err := nodes[2].Set(ctx, k.Lock, foreign, time.Minute).Err(); err != nil {
				return Injected{}, err
			}
			defer nodes[2].Del(context.Background(), k.Lock) // never leave it behind
			// Wait for a holder whose lock is on nodes 0 and 1 (not 2).
			deadline := time.Now().Add(15 * time.Second)
			for {
				if time.Now().After(deadline) {
					return Injected{}, errors.New("no holder with the bare majority {0,1} within 15s")
				}
				w, tok, err := env.waitHolder(ctx)
				if err != nil {
					return Injected{}, err
				}
				v0, _ := nodes[0].Get(ctx, k.Lock).Result()
				v1, _ := nodes[1].Get(ctx, k.Lock).Result()
				if v0 == "" || v0 != v1 || v0 == foreign || readStatus(w.status) != tok {
					time.Sleep(time.Millisecond)
					continue
				}
				in := Injected{Worker: w.ID, Token: tok, Start: Mono()}
				if err := syscall.Kill(w.pid, syscall.SIGSTOP); err != nil {
					return in, err
				}
				// Only if the paused holder still holds it there and has not
				// started its database work (an open guarded transaction
				// would hold the fence row and block the second holder).
				if got, _ := nodes[1].Get(ctx, k.Lock).Result(); got != v0 || readStatus(w.status) != tok {
					_ = syscall.Kill(w.pid, syscall.SIGCONT)
					continue
				}
				_ = nodes[1].Del(ctx, k.Lock).Err()
				_ = nodes[2].Del(ctx, k.Lock).Err()
				// The harness is the second client: it takes {1, 2} and
				// writes, while the first holder is still paused.
				tok2, err := env.secondHolder(ctx)
				switch {
				case err != nil && env.otherHolds(w):
					in.Note = "a worker became the second holder first"
				case err != nil:
					in.Note = "no second holder: " + err.Error()
				case tok2 <= tok:
					in.Broken = fmt.Sprintf("second holder got token %d <= %d: tokens out of order", tok2, tok)
				default:
					in.Note = fmt.Sprintf("second holder (token %d) wrote while the first (token %d) was paused", tok2, tok)
				}
				in.End = Mono()
				if err := syscall.Kill(w.pid, syscall.SIGCONT); err != nil {
					return in, err
				}
				return in, nil
			}
		},
	}
}

// otherHolds reports whether a worker other than w says it holds the lock.
func (env *Env) otherHolds(w *Worker) bool {
	for _, o := range env.Workers {
		if o != w && readStatus(o.status) != 0 {
			return true
		}
	}
	return false
}

// secondHolder takes the lock from this process, does one read-modify-write
// of the counter (guarded in guarded mode), releases, and records it all as
// the history of one more worker. It returns its token.
func (env *Env) secondHolder(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, env.Target.URL(env.Target.addrs()), distlock.WithTTL(env.Target.TTL))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	id := len(env.Workers)
	t0 := Mono()
	lease, err := l.TryAcquire(ctx, env.Key)
	if err != nil {
		return 0, err
	}
	tok, fence := int64(lease.Token()), lease.Fence()
	env.record(Event{Worker: id, Ev: "acquire", T0: t0, T: Mono(), Epoch: fence.Epoch, Token: tok, Holder: fence.Holder})
	w := Event{Worker: id, Ev: "write", T0: Mono(), Epoch: fence.Epoch, Token: tok, Holder: fence.Holder}
	incr := func(q querier) error {
		if err := q.QueryRow(ctx, `SELECT n FROM faults_counter WHERE key = $1`, env.Key).Scan(&w.Read); err != nil {
			return err
		}
		w.Value, w.TW = w.Read+1, Mono()
		_, err := q.Exec(ctx, `UPDATE faults_counter SET n = $2 WHERE key = $1`, env.Key, w.Value)
		return err
	}
	if env.Guarded {
		err = fencing.WithGuard(ctx, env.Pool, env.Key, fence, func(tx pgx.Tx) error { return incr(tx) })
	} else {
		err = incr(env.Pool)
	}
	w.Valid = history.LeaseValid(lease)
	switch {
	case err == nil:
		w.Result = "ok"
	case errors.Is(err, fencing.ErrStaleToken):
		w.Result = "stale"
	default:
		w.Result, w.Err = "error", err.Error()
	}
	w.T = Mono()
	env.record(w)
	t1 := Mono()
	rerr := lease.Release(ctx)
	env.record(Event{Worker: id, Ev: "release", T0: t1, T: Mono(), Token: tok})
	return tok, errors.Join(err, rerr)
}

// querier is what a pool and a transaction share here.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
