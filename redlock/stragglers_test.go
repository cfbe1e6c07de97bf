package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// Schedules of the repairing Refresh with straggling requests. The comment
// of each test describes the schedule and the rule it checks.

// hk is a go-redis hook on one client's link to one node: a cut link, a
// delay of the next script call (or of every one) before it is sent — a
// slow link, well inside the node timeout — or a lost reply (the script
// runs on the node, the caller sees a timeout; no go-redis retry).
type hk struct {
	cut       atomic.Bool
	delayNext atomic.Int64 // ns
	delayAll  atomic.Int64 // ns
	loseNext  atomic.Bool
}

func (h *hk) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.cut.Load() {
			return nil, errCut
		}
		return next(ctx, network, addr)
	}
}

func (h *hk) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *hk) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.cut.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			d := h.delayNext.Swap(0) + h.delayAll.Load()
			if d > 0 {
				// A slow link: the request is on the wire at once and
				// cannot be recalled; it reaches the node after d/2 and
				// the reply comes back d/2 later.
				time.Sleep(time.Duration(d / 2))
				err := next(context.WithoutCancel(ctx), cmd)
				time.Sleep(time.Duration(d / 2))
				if cerr := ctx.Err(); cerr != nil {
					cmd.SetErr(cerr)
					return cerr
				}
				return err
			}
			if h.loseNext.CompareAndSwap(true, false) {
				e := next(context.WithoutCancel(ctx), cmd)
				if e != nil && strings.HasPrefix(e.Error(), "NOSCRIPT") {
					h.loseNext.Store(true) // go-redis sends EVAL next
					return e
				}
				cmd.SetErr(context.DeadlineExceeded)
				return context.DeadlineExceeded
			}
		}
		return next(ctx, cmd)
	}
}

// rdrop is a net.Conn that, once armed, lets the next script call run on
// the node and loses its reply with the connection (io.EOF), below
// go-redis's retry loop: go-redis resends the call.
type rdrop struct {
	net.Conn
	armed  *atomic.Bool
	poison atomic.Bool
}

func (c *rdrop) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && c.armed.CompareAndSwap(true, false) {
		c.poison.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *rdrop) Read(p []byte) (int, error) {
	if c.poison.Load() {
		_, _ = c.Conn.Read(p)
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// hooked returns a Locker whose link to each node has an hk; drops[i], when
// not nil, arms an rdrop on node i's connections.
func hooked(t *testing.T, srvs []*testserver.Server, drops []*atomic.Bool, opts ...distlock.Option) (distlock.Locker, []*hk) {
	t.Helper()
	var cs []goredis.UniversalClient
	hs := make([]*hk, len(srvs))
	for i, s := range srvs {
		o := &goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second}
		if drops != nil && drops[i] != nil {
			armed := drops[i]
			var d net.Dialer
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				cn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &rdrop{Conn: cn, armed: armed}, nil
			}
		}
		c := goredis.NewClient(o)
		hs[i] = &hk{}
		c.AddHook(hs[i])
		cs = append(cs, c)
	}
	l, err := redlock.New(cs, append([]distlock.Option{redlock.WithCloseClients(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	loadScripts(t, srvs)
	return l, hs
}

// loadScripts loads the lock scripts on every node, so that no EVALSHA of a
// test meets NOSCRIPT (a real client then sends EVAL, which a cancelled
// straggler never does).
func loadScripts(t *testing.T, srvs []*testserver.Server) {
	t.Helper()
	files, _ := filepath.Glob("../internal/redisnode/lua/*.lua")
	if len(files) == 0 {
		t.Fatal("no lock scripts found to load")
	}
	for _, c := range clients(t, srvs, false) {
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ScriptLoad(context.Background(), string(src)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// (b) A slow node is counted as holding the lock "by its clock" while its
// own answer, arriving within the node timeout, would say the lock had
// vanished there. Schedule: A holds {0,2} (its link to node 1 was cut at
// acquire); a clock jump on node 0 frees A's lock there (DEL); B takes
// {0,1} with a larger token and releases. A's Refresh: node 1 retaken,
// node 2 renewed, node 0's call is 60 ms slow (node timeout 100 ms). Refresh
// decides at quorum, counts node 0 as unbroken and A carries on.
func TestSlowNodeAnswersBeforeCountedByClock(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-slow-unbroken", 5 * time.Second
	nt := redlock.WithNodeTimeout(100 * time.Millisecond)
	aL, hs := hooked(t, srvs, nil, nt)
	admins := clients(t, srvs, false)
	hs[1].cut.Store(true)
	a, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	hs[1].cut.Store(false)
	if held := lockExists(t, admins, "distlock:", key); len(held) != 2 || held[0] != 0 || held[1] != 2 {
		t.Fatalf("A's lock on %v, want [0 2]", held)
	}
	admins[0].Del(ctx, redisnode.KeysFor("distlock:", key).Lock) // clock jump on node 0
	b, err := newLocker(t, srvs, nt).TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	bTok := b.Token()
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hs[0].delayNext.Store(int64(60 * time.Millisecond))
	rerr := a.Refresh(ctx)
	time.Sleep(200 * time.Millisecond)
	if rerr == nil && a.Err() == nil {
		t.Fatalf("A (token %d) refreshed and reports held after B was granted token %d in between "+
			"(a majority {0,1} was free); lock now on nodes %v", a.Token(), bTok, lockExists(t, admins, "distlock:", key))
	}
	t.Logf("held: refresh err %v", rerr)
}

// (b) A retake whose reply was lost is resent by go-redis; the resend finds
// the lock it just took and answers "renewed", which Refresh counts as
// unbroken. Same schedule as above, but node 0 answers (through the
// resend) and node 1 is the slow one.
func TestResentRetakeStillCountsAsRetaken(t *testing.T) {
	t.Run("resent", func(t *testing.T) { resentRetake(t, true) })
	t.Run("control", func(t *testing.T) { resentRetake(t, false) })
}

func resentRetake(t *testing.T, drop bool) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-resent-retake", 5 * time.Second
	nt := redlock.WithNodeTimeout(200 * time.Millisecond)
	var drop0 atomic.Bool
	aL, hs := hooked(t, srvs, []*atomic.Bool{&drop0, nil, nil}, nt)
	admins := clients(t, srvs, false)
	hs[1].cut.Store(true)
	a, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	hs[1].cut.Store(false)
	if held := lockExists(t, admins, "distlock:", key); len(held) != 2 || held[0] != 0 || held[1] != 2 {
		t.Fatalf("A's lock on %v, want [0 2]", held)
	}
	admins[0].Del(ctx, redisnode.KeysFor("distlock:", key).Lock) // clock jump on node 0
	b, err := newLocker(t, srvs, nt).TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	bTok := b.Token()
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	drop0.Store(drop)
	hs[1].delayNext.Store(int64(120 * time.Millisecond))
	rerr := a.Refresh(ctx)
	if !drop {
		if rerr == nil {
			t.Fatal("control: the refresh succeeded without the resend")
		}
		t.Logf("control: %v", rerr)
		return
	}
	if drop0.Load() {
		t.Fatal("the reply was not dropped")
	}
	time.Sleep(300 * time.Millisecond)
	if rerr == nil && a.Err() == nil {
		t.Fatalf("A (token %d) refreshed and reports held after B was granted token %d in between; "+
			"node 0's retake was resent by go-redis and answered 'renewed'; lock on %v",
			a.Token(), bTok, lockExists(t, admins, "distlock:", key))
	}
	t.Logf("held: refresh err %v", rerr)
}

// (a) A Release whose calls ran on a majority but whose replies were lost
// returns an error and leaves the lease reporting held (Err nil, Done open)
// until its deadline, while another client takes the key.
func TestFailedReleaseEndsLease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-release-lost", 10 * time.Second
	nt := redlock.WithNodeTimeout(100 * time.Millisecond)
	aL, hs := hooked(t, srvs, nil, nt)
	a, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	hs[0].loseNext.Store(true)
	hs[1].loseNext.Store(true)
	relErr := a.Release(ctx)
	b, err := newLocker(t, srvs, nt).TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("B could not acquire: %v (release err %v)", err, relErr)
	}
	defer b.Release(ctx)
	time.Sleep(500 * time.Millisecond)
	if a.Err() == nil && b.Err() == nil {
		t.Fatalf("two leases report held: A token %d (Release returned %v, A.Expires in %v) and B token %d",
			a.Token(), relErr, time.Until(a.Expires()).Round(time.Millisecond), b.Token())
	}
}

// (d) A renewing lease holds the lock on all three nodes, but node 2 always
// answers 30 ms after the others (node timeout 100 ms), so Refresh decides
// on {0,1} and never records node 2. Node 0 is killed and restarted empty
// right after a refresh (inside the TTL). The next refresh retakes node 0
// and finds only node 1 "unbroken": the lease is lost although nodes 1 and
// 2 held the lock without a break.
func TestLateAnswersKeepLeaseAcrossEarlyRestart(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-restart-early", 1500 * time.Millisecond
	refreshed := make(chan struct{}, 1)
	obs := obsFunc(func(e distlock.Event) {
		if e.Kind == distlock.EventRefreshed {
			select {
			case refreshed <- struct{}{}:
			default:
			}
		}
	})
	aL, hs := hooked(t, srvs, nil, redlock.WithNodeTimeout(100*time.Millisecond), distlock.WithObserver(obs))
	admins := clients(t, srvs, false)
	hs[2].delayAll.Store(int64(30 * time.Millisecond))
	a, err := aL.Acquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.WithoutCancel(ctx))
	for range 3 {
		<-refreshed
	}
	time.Sleep(50 * time.Millisecond)
	if held := lockExists(t, admins, "distlock:", key); len(held) != 3 {
		t.Fatalf("lock on %v, want all three", held)
	}
	<-refreshed
	if err := srvs[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srvs[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// Watch nodes 1 and 2: the lock must stay on both throughout.
	end := time.Now().Add(2 * ttl)
	for time.Now().Before(end) {
		if held := lockExists(t, admins, "distlock:", key); len(held) < 2 && a.Err() == nil {
			t.Fatalf("lock on %v only", held)
		}
		if a.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the lease died %v after node 0 (one of three) restarted; nodes 1 and 2 held it all along: %v",
			time.Since(restarted).Round(time.Millisecond), err)
	}
}

type obsFunc func(distlock.Event)

func (f obsFunc) Observe(_ context.Context, e distlock.Event) { f(e) }

// (e) A phase-1 call that is merely slow (60 ms, node timeout 100 ms) lands
// after Release returned nil: node 2 keeps the released lease's lock for
// the whole TTL.
func TestAcquireStragglerCannotOutliveRelease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-acq-straggler", 10 * time.Second
	aL, hs := hooked(t, srvs, nil, redlock.WithNodeTimeout(100*time.Millisecond))
	admins := clients(t, srvs, false)
	// warm up the scripts and connections
	if w, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	} else if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hs[2].delayNext.Store(int64(60 * time.Millisecond))
	a, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	time.Sleep(200 * time.Millisecond)
	if held := lockExists(t, admins, "distlock:", key); len(held) > 0 {
		pttl := admins[held[0]].PTTL(ctx, redisnode.KeysFor("distlock:", key).Lock).Val()
		t.Fatalf("%v after Release returned nil, the lock is on nodes %v (PTTL %v)", time.Since(released).Round(time.Millisecond), held, pttl)
	}
}

// (e) settle waits only for the last refresh's calls: a slow call of the
// refresh before lands after Release returned nil and retakes node 2.
func TestRefreshStragglerCannotOutliveRelease(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const key, ttl = "audit2-ref-straggler", 10 * time.Second
	aL, hs := hooked(t, srvs, nil, redlock.WithNodeTimeout(100*time.Millisecond))
	admins := clients(t, srvs, false)
	a, err := aL.TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	hs[2].delayNext.Store(int64(60 * time.Millisecond))
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx, distlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	released := time.Now()
	time.Sleep(200 * time.Millisecond)
	if held := lockExists(t, admins, "distlock:", key); len(held) > 0 {
		pttl := admins[held[0]].PTTL(ctx, redisnode.KeysFor("distlock:", key).Lock).Val()
		t.Fatalf("%v after Release returned nil (it took %v), the lock is on nodes %v (PTTL %v)",
			time.Since(released).Round(time.Millisecond), took.Round(time.Millisecond), held, pttl)
	}
}

var _ = errors.Is
