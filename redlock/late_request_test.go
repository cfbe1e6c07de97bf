package redlock_test

// Requests that land late, or twice (see redis's late_request_test.go), on
// the nodes of a Redlock set.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/internal/testutil"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

// A short refresh whose copies to two of three nodes are held up (it fails:
// one node of three), then a longer refresh that succeeds everywhere: the
// late short copies must not cut the two nodes back to the short TTL, which
// would free a majority under a lease that counts on the long one.
func TestLateShortRefreshDoesNotFreeMajority(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 1500 * time.Millisecond
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for i, s := range srvs {
		addr := s.Addr()
		if i < 2 {
			px := testutil.NewDelayProxy(t, addr, delay)
			pxs = append(pxs, px)
			addr = px.Addr()
		}
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	const key = "late-refresh"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Refresh(ctx); err != nil { // the extend script is loaded
		t.Fatal(err)
	}
	for _, px := range pxs {
		px.HoldNext(1, []byte("\r\n1000\r\n"))
	}
	err = la.Refresh(ctx, distlock.WithTTL(time.Second))
	t.Logf("short refresh, held up on two nodes: %v", err)
	if err := la.Refresh(ctx, distlock.WithTTL(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay + 1200*time.Millisecond) // the late copies landed, and their 1 s passed
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err == nil {
		defer lb.Release(context.WithoutCancel(ctx))
		t.Fatalf("two holders: A (token %d, Err %v, %v left) and B (token %d)",
			la.Token(), la.Err(), time.Until(la.Expires()).Round(time.Millisecond), lb.Token())
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// replyLoser is a net.Conn whose next script call's reply, once armed, is
// read off the socket (the node ran the script) and thrown away with the
// connection: go-redis sees io.EOF and resends, below any hook.
type replyLoser struct {
	net.Conn
	armed  *atomic.Bool
	poison atomic.Bool
}

func (c *replyLoser) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("evalsha")) && c.armed.CompareAndSwap(true, false) {
		c.poison.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *replyLoser) Read(p []byte) (int, error) {
	if c.poison.Load() {
		_, _ = c.Conn.Read(p)
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// A lease held on exactly two of three nodes, released: one of the two
// loses the release's reply, and go-redis's resend finds the lock gone. The
// release freed a majority, so it succeeds and the lease ends released.
func TestResentReleaseCountsOnBareMajority(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	var armed atomic.Bool
	var d net.Dialer
	var cs []goredis.UniversalClient
	for i, s := range srvs {
		o := &goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second}
		if i == 0 {
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &replyLoser{Conn: conn, armed: &armed}, nil
			}
		}
		cs = append(cs, goredis.NewClient(o))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const key = "resent-release"
	ctx := t.Context()
	warm, err := a.TryAcquire(ctx, key+"-warm") // the scripts are loaded
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	admin := clients(t, srvs[2:], false)[0]
	if err := admin.Del(ctx, redisnode.KeysFor(redis.DefaultPrefix, key).Lock).Err(); err != nil {
		t.Fatal(err)
	}
	armed.Store(true) // node 0 loses the release's reply; go-redis resends it
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a release that freed the lease's majority reported: %v", err)
	}
	if err := la.Err(); !errors.Is(err, distlock.ErrReleased) {
		t.Fatalf("lease ended with %v, want ErrReleased", err)
	}
	if armed.Load() {
		t.Fatal("node 0's release reply was not dropped: the test did not run its schedule")
	}
}

// A lease tries to lengthen itself; the extend's copies to two of three
// nodes are held up (the refresh fails for want of a quorum), and the
// lease is released. The held copies landing after the release must not
// take the lock back: the release's tombstone refuses them for the TTL and
// the margin a copy may be late by.
func TestLateExtendCopyAfterReleaseTakesNothing(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 2500 * time.Millisecond
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for i, s := range srvs {
		addr := s.Addr()
		if i < 2 {
			px := testutil.NewDelayProxy(t, addr, delay)
			pxs = append(pxs, px)
			addr = px.Addr()
		}
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	loadScripts(t, srvs)
	const key = "late-extend-after-release"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range pxs {
		px.HoldNext(1, []byte("\r\n30000\r\n")) // the 30 s extend's copies to nodes 0 and 1
	}
	err = la.Refresh(ctx, distlock.WithTTL(30*time.Second))
	t.Logf("30 s refresh, held up on two nodes: %v", err)
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	time.Sleep(delay + 500*time.Millisecond) // the held copies landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err == nil {
		_ = lb.Release(context.WithoutCancel(ctx))
		return
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	t.Fatalf("A released (token %d), yet its late extend copies took the key back: Inspect held=%v token=%d ttl=%v; B: %v",
		la.Token(), h.Held, h.Token, h.TTL.Round(time.Second), err)
}

// Node clients that read with a timeout below the node timeout, so go-redis
// resends a phase-1 acquire while its first copy is held up. The resends
// find the key held and the attempt fails; the held copies landing after
// the holder released must be refused, not take the nodes for nobody.
func TestLatePhaseOneCopyOfRefusedAttemptTakesNothing(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 1500 * time.Millisecond
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for _, s := range srvs {
		px := testutil.NewDelayProxy(t, s.Addr(), delay)
		pxs = append(pxs, px)
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, ReadTimeout: 200 * time.Millisecond}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	loadScripts(t, srvs)
	const key = "late-phase1-held-out"
	ctx := t.Context()
	lb, err := b.TryAcquire(ctx, key, distlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range pxs {
		px.HoldNext(1, []byte(key+"}")) // A's phase-1 first copies
	}
	_, err = a.TryAcquire(ctx, key, distlock.WithTTL(30*time.Second))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("A's attempt (answered by the resent copies, B holding): %v, want ErrNotAcquired", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay + 300*time.Millisecond) // the late first copies landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("key stranded by the late phase-1 copies of A's failed attempt (Inspect: held=%v ttl=%v): %v",
			h.Held, h.TTL.Round(time.Second), err)
	}
	_ = lc.Release(context.WithoutCancel(ctx))
}

// A 1 s lease tries to lengthen itself to 30 s; the extend's copies to two
// of three nodes are held up (4 s, within redisnode.MaxLate), so the
// refresh fails and the lease stays at 1 s; then it is released. The held
// copies must not take the lock back on a majority.
func TestLateLongExtendCopyAfterReleaseTakesNothing(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	const delay = 4 * time.Second
	var cs []goredis.UniversalClient
	var pxs []*testutil.DelayProxy
	for i, s := range srvs {
		addr := s.Addr()
		if i < 2 {
			px := testutil.NewDelayProxy(t, addr, delay)
			pxs = append(pxs, px)
			addr = px.Addr()
		}
		cs = append(cs, goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second}))
	}
	a, err := redlock.New(cs, redlock.WithCloseClients(true), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newLocker(t, srvs)
	loadScripts(t, srvs)
	const key = "late-long-extend"
	ctx := t.Context()
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for _, px := range pxs {
		px.HoldNext(1, []byte("\r\n30000\r\n")) // the 30 s extend's copies to nodes 0 and 1
	}
	err = la.Refresh(ctx, distlock.WithTTL(30*time.Second))
	t.Logf("30 s refresh, held up on two nodes: %v (lease TTL now %v)", err, la.TTL())
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	time.Sleep(time.Until(sent.Add(delay + 500*time.Millisecond))) // the held copies landed
	h, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, key)
	if err == nil {
		_ = lb.Release(context.WithoutCancel(ctx))
		return
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatal(err)
	}
	t.Fatalf("A released (token %d); its 30 s extend copies, %v late, took the key back for nobody: Inspect held=%v token=%d ttl=%v; B: %v",
		la.Token(), delay, h.Held, h.Token, h.TTL.Round(time.Second), err)
}

// A node that refused the lease's attempt (a stale lock of another owner
// there, so the node remembers the attempt as refused) is still taken back
// by the lease's refresh once that lock is gone.
func TestRepairPastRefusedAttempt(t *testing.T) {
	srvs := testserver.RedisN(t, 3)
	admins := clients(t, srvs, false)
	a := newLocker(t, srvs)
	const key = "review-repair-refused"
	ctx := t.Context()
	k := redisnode.KeysFor(redis.DefaultPrefix, key)
	if err := admins[0].Set(ctx, k.Lock, "stale-owner", 700*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	la, err := a.TryAcquire(ctx, key, distlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := admins[1].Get(ctx, k.Lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	// TryAcquire decides on a majority: node 0's answers may land later.
	var v string
	if !testutil.Soon(func() bool { v, _ = admins[0].Get(ctx, k.GoneFor(owner)).Result(); return v == "refused" }) {
		t.Fatalf("node 0 tombstone for the lease's owner: %q, want refused", v)
	}
	time.Sleep(time.Second) // the stale lock expired on node 0
	if err := la.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var got string
	if !testutil.Soon(func() bool { got, _ = admins[0].Get(ctx, k.Lock).Result(); return got == owner }) {
		t.Fatalf("node 0 lock after the refresh: %q, want the lease's %q", got, owner)
	}
	if held := lockExists(t, admins, redis.DefaultPrefix, key); len(held) != 3 {
		t.Fatalf("lock on nodes %v, want all three", held)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
