// Package redis is the single-Redis backend of distlock, on go-redis v9: a
// plain client, a Sentinel failover client and a Cluster client all work
// (anything that is a goredis.UniversalClient). It serves "redis://" and
// "rediss://" URLs for distlock.Open.
//
// # How it works
//
// Acquire is one round trip: a Lua script runs SET lock owner NX PX ttl and,
// only if that succeeded, advances a per-key counter that never expires to
// max(counter + 1, the server's TIME in microseconds); the counter is the
// fencing token. When the key is held the script returns the holder's PTTL
// instead, which bounds the fallback poll of a waiter. Refresh (PEXPIRE) and
// release (DEL, then PUBLISH a release notice) are Lua scripts that first
// compare the stored owner value, a random 128-bit value unique to each
// acquire attempt. Scripts are called with EVALSHA and fall back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover).
//
// Waiters are woken by the release's PUBLISH, through one shared pub/sub
// connection per Locker (see [Notifier]); a notice that is lost only delays
// a waiter until the holder's TTL runs out (at most 5s between polls).
//
// # Key layout
//
// With the default prefix "distlock:", key "orders/42" uses
//
//	distlock:{orders/42}            the lock: owner value, PX expiry
//	distlock:{orders/42}:token      the token counter, no expiry
//	distlock:{orders/42}:released   the pub/sub channel of release notices
//
// The braces are a Cluster hash tag: lock and counter share a slot, so the
// acquire script may touch both. Inside the tag "%" and "}" are escaped
// ("%25", "%7D"); see [KeysFor]. Set the prefix with [WithKeyPrefix].
//
// # Guarantees
//
// Mutual exclusion holds while the one Redis server keeps its data. It does
// not survive a failover to a replica that had not received the latest
// writes, nor a restart that loses writes (anything short of appendonly with
// appendfsync always): a held lock can then be lost, and a second client
// can acquire while the first still believes it holds the key.
//
// Fencing tokens strictly increase across those events too, under one
// assumption: the clocks of the servers that serve a key (a master and the
// replicas that may replace it) differ by less than a restart or failover
// takes, and do not step back across it. A restarted server that lost the
// counter, or a promoted replica whose counter lags, seeds the next token
// from its clock in microseconds, which is past every token handed out
// before. So a guarded resource (package fencing) still refuses the writes
// of a holder whose lock was lost that way. [WithWaitReplicas] narrows the
// failover window by running WAIT after each acquire and refresh (WAIT does
// not make Redis strongly consistent). A maxmemory-policy of allkeys-* can
// evict the token counter; the next token then still comes from the clock,
// but the backend checks the policy when it starts and warns, or refuses
// with [WithEvictionCheck]. volatile-* policies can evict held locks early.
// Locks are not FIFO: any waiter may win after a release.
//
// # For Redlock and other multi-node backends
//
// The scripts are reusable per node without copying: [AcquireOn],
// [RefreshOn], [ReleaseOn] and [RaiseTokenOn] each run one script in one
// round trip on any goredis.Scripter, using the layout of [KeysFor].
// RaiseTokenOn is Redlock's phase 2 ("raise the counter to at least T, only
// while the lock still holds owner O"). [NewNotifier] gives release notices
// for one node.
//
// Clients should set ContextTimeoutEnabled so that context deadlines bound
// socket reads and writes; URLs opened with distlock.Open do.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	driver.Register("redis", open)
	driver.Register("rediss", open)
}

// Errors of this backend, wrapped in the errors it returns.
var (
	// ErrNotReplicated: WithWaitReplicas is set and fewer replicas than
	// required acknowledged a lock write in time. An acquire that fails
	// this way has given the lock back.
	ErrNotReplicated = errors.New("redis: lock write not acknowledged by enough replicas")

	// ErrEvictionPolicy: WithEvictionCheck(EvictionRefuse) found a
	// maxmemory-policy that can evict the token counter, or could not read
	// the policy.
	ErrEvictionPolicy = errors.New("redis: maxmemory-policy may evict the fencing-token counter")
)

// EvictionCheck says what to do about a maxmemory-policy that can evict keys
// without a TTL (allkeys-*), such as the never-expiring token counter.
type EvictionCheck int

const (
	// EvictionWarn (the default) logs a warning to the WithLogger logger
	// (nothing is logged without one).
	EvictionWarn EvictionCheck = iota
	// EvictionRefuse makes the constructor fail with ErrEvictionPolicy when
	// the policy is allkeys-* or cannot be read.
	EvictionRefuse
	// EvictionIgnore skips the check (e.g. where CONFIG is disabled).
	EvictionIgnore
)

// String returns "warn", "refuse" or "ignore".
func (m EvictionCheck) String() string {
	switch m {
	case EvictionWarn:
		return "warn"
	case EvictionRefuse:
		return "refuse"
	case EvictionIgnore:
		return "ignore"
	}
	return fmt.Sprintf("EvictionCheck(%d)", int(m))
}

type (
	prefixKey      struct{}
	waitKey        struct{}
	evictionKey    struct{}
	closeClientKey struct{}
)

type waitSetting struct {
	n       int
	timeout time.Duration
}

// WithKeyPrefix sets the prefix of every key and channel this backend uses
// (default DefaultPrefix). It must not contain '{' or '}', which would break
// the hash tag. Lockers that should exclude each other need the same prefix.
func WithKeyPrefix(prefix string) distlock.Option {
	if strings.ContainsAny(prefix, "{}") {
		return driver.InvalidOption("redis: key prefix %q contains a brace", prefix)
	}
	return driver.BackendOption("redis", "WithKeyPrefix", prefixKey{}, prefix)
}

// WithWaitReplicas makes every acquire and refresh wait, with Redis's WAIT,
// until n replicas acknowledged the write or timeout passed. Fewer acks fail
// the call with ErrNotReplicated (an acquire then gives the lock back). n = 0
// turns it off. It needs a *goredis.Client (plain or failover) or a
// *goredis.ClusterClient, since WAIT must run on the connection that wrote.
func WithWaitReplicas(n int, timeout time.Duration) distlock.Option {
	switch {
	case n < 0:
		return driver.InvalidOption("redis: wait for %d replicas", n)
	case n > 0 && timeout <= 0:
		return driver.InvalidOption("redis: replica wait timeout %v must be positive", timeout)
	}
	return driver.BackendOption("redis", "WithWaitReplicas", waitKey{}, waitSetting{n, timeout})
}

// WithEvictionCheck sets what the constructor does about a maxmemory-policy
// that can evict the token counter (default EvictionWarn).
func WithEvictionCheck(mode EvictionCheck) distlock.Option {
	if mode < EvictionWarn || mode > EvictionIgnore {
		return driver.InvalidOption("redis: unknown eviction check %d", int(mode))
	}
	return driver.BackendOption("redis", "WithEvictionCheck", evictionKey{}, mode)
}

// WithCloseClient makes Close also close the client (default: the caller
// owns it). Lockers from distlock.Open always close theirs.
func WithCloseClient(on bool) distlock.Option {
	return driver.BackendOption("redis", "WithCloseClient", closeClientKey{}, on)
}

// setupTimeout bounds the eviction check of New and NewBackend, which take
// no context.
const setupTimeout = 5 * time.Second

// New returns a Locker on client. Unless WithEvictionCheck(EvictionIgnore)
// is given it reads the server's maxmemory-policy once (CONFIG GET, bounded
// by 5s). Close does not close client unless WithCloseClient(true).
func New(client goredis.UniversalClient, opts ...distlock.Option) (distlock.Locker, error) {
	b, err := NewBackend(client, opts...)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, opts...) // closes b if it fails
}

// NewBackend returns the raw Backend on client, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes the same options
// as New.
func NewBackend(client goredis.UniversalClient, opts ...distlock.Option) (driver.Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return newBackend(ctx, client, opts)
}

func newBackend(ctx context.Context, client goredis.UniversalClient, opts []distlock.Option) (*backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis: nil client", distlock.ErrInvalidOption)
	}
	o, err := driver.Resolve(driver.Settings{}, "redis", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, DefaultPrefix)
	wait, _ := driver.BackendValue[waitSetting](o, waitKey{})
	if wait.n > 0 {
		switch client.(type) {
		case *goredis.Client, *goredis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: redis: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T",
				distlock.ErrInvalidOption, client)
		}
	}
	closeClient, _ := driver.BackendValue[bool](o, closeClientKey{})
	mode, _ := driver.BackendValue[EvictionCheck](o, evictionKey{})
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler) // only WithLogger's logger speaks
	}
	if err := checkEviction(ctx, client, mode, logger); err != nil {
		return nil, err
	}
	return &backend{
		client: client, prefix: prefix, wait: wait, closeClient: closeClient,
		notifier: NewNotifier(client, prefix),
	}, nil
}

// EvictionPolicy returns the server's maxmemory-policy; for a Cluster, the
// riskiest policy among its masters.
func EvictionPolicy(ctx context.Context, client goredis.UniversalClient) (string, error) {
	get := func(ctx context.Context, c goredis.UniversalClient) (string, error) {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return "", fmt.Errorf("CONFIG GET maxmemory-policy: %w", err)
		}
		p, ok := m["maxmemory-policy"]
		if !ok {
			return "", errors.New("CONFIG GET maxmemory-policy: no value")
		}
		return p, nil
	}
	cc, ok := client.(*goredis.ClusterClient)
	if !ok {
		return get(ctx, client)
	}
	var mu sync.Mutex
	worst := ""
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		p, err := get(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		if worst == "" || evictionRisk(p) > evictionRisk(worst) {
			worst = p
		}
		mu.Unlock()
		return nil
	})
	return worst, err
}

// evictionRisk ranks policies: 2 can evict the counter, 1 can evict locks.
func evictionRisk(policy string) int {
	switch {
	case strings.HasPrefix(policy, "allkeys-"):
		return 2
	case strings.HasPrefix(policy, "volatile-"):
		return 1
	}
	return 0
}

func checkEviction(ctx context.Context, client goredis.UniversalClient, mode EvictionCheck, logger *slog.Logger) error {
	if mode == EvictionIgnore {
		return nil
	}
	policy, err := EvictionPolicy(ctx, client)
	if err != nil {
		if mode == EvictionRefuse {
			return fmt.Errorf("%w: cannot read it (use WithEvictionCheck(EvictionIgnore) where CONFIG is disabled): %w", ErrEvictionPolicy, err)
		}
		logger.Warn("distlock: redis: could not check maxmemory-policy; if it is allkeys-*, fencing tokens can repeat",
			slog.Any("error", err))
		return nil
	}
	switch evictionRisk(policy) {
	case 2:
		if mode == EvictionRefuse {
			return fmt.Errorf("%w: %s (set noeviction or volatile-*)", ErrEvictionPolicy, policy)
		}
		logger.Warn("distlock: redis: maxmemory-policy can evict the never-expiring token counter; fencing tokens can then repeat",
			slog.String("maxmemory-policy", policy))
	case 1:
		logger.Warn("distlock: redis: maxmemory-policy can evict held locks before their TTL; tokens stay safe",
			slog.String("maxmemory-policy", policy))
	}
	return nil
}

// backend implements driver.Backend, with release notices.
type backend struct {
	driver.NoQueue
	client      goredis.UniversalClient
	prefix      string
	wait        waitSetting
	closeClient bool
	notifier    *Notifier

	closeOnce sync.Once
	closeErr  error
}

// handle is a Grant's Handle: Lease.As(*Keys) reaches the lock's keys.
type handle struct{ keys Keys }

func (h *handle) As(target any) bool {
	if p, ok := target.(*Keys); ok {
		*p = h.keys
		return true
	}
	return false
}

var guarantees = distlock.Guarantees{
	Backend:           "redis",
	TokenSource:       "per-key counter that never expires, advanced to max(counter+1, server TIME in µs) in the same Lua script as SET NX PX",
	Wait:              distlock.WaitNotify,
	FailuresTolerated: 0,
	RestartLosesLocks: true,
	Notes: []string{
		"a failover to a lagging replica, or a restart without appendfsync always, can lose held locks; WithWaitReplicas runs WAIT after each acquire and refresh to narrow the failover window",
		"tokens still increase across restarts and failovers while server clocks differ by less than the restart or failover takes (a lost or lagging counter restarts from the server's clock in µs)",
		"maxmemory-policy allkeys-* can evict the token counter; the backend warns, or refuses with WithEvictionCheck(EvictionRefuse)",
		"waiters are woken by pub/sub, not in FIFO order",
	},
}

func (b *backend) Guarantees() distlock.Guarantees {
	g := guarantees
	g.Notes = append([]string(nil), guarantees.Notes...)
	return g
}

func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := KeysFor(b.prefix, req.Key)
	var (
		r   AcquireResult
		err error
	)
	if b.wait.n > 0 {
		err = b.onConn(ctx, k, func(c *goredis.Conn) error {
			var err error
			if r, err = AcquireOn(ctx, c, k, req.Owner, req.TTL); err != nil || !r.Acquired {
				return err
			}
			if err := b.waitReplicas(ctx, c); err != nil {
				// Not durable enough: give the lock back rather than hand
				// out a token that a failover could repeat.
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_, _ = ReleaseOn(rctx, c, k, req.Owner, 0)
				cancel()
				return err
			}
			return nil
		})
	} else {
		r, err = AcquireOn(ctx, b.client, k, req.Owner, req.TTL)
	}
	if err != nil {
		return driver.Grant{}, err
	}
	if !r.Acquired {
		return driver.Grant{}, &distlock.HeldError{Key: req.Key, RetryAfter: max(r.HolderTTL, 0)}
	}
	return driver.Grant{Token: r.Token, Handle: &handle{keys: k}}, nil
}

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	k := KeysFor(b.prefix, g.Key)
	var (
		ok  bool
		err error
	)
	if b.wait.n > 0 {
		err = b.onConn(ctx, k, func(c *goredis.Conn) error {
			var err error
			if ok, err = RefreshOn(ctx, c, k, g.Owner, ttl); err != nil || !ok {
				return err
			}
			return b.waitReplicas(ctx, c)
		})
	} else {
		ok, err = RefreshOn(ctx, b.client, k, g.Owner, ttl)
	}
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, distlock.ErrNotHeld
	}
	return ttl, nil
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	// An attempt given back because its reply was lost (no Handle) may
	// still be on its way: leave a tombstone so it cannot land afterwards.
	var tomb time.Duration
	if g.Handle == nil {
		tomb = g.TTL
	}
	ok, err := ReleaseOn(ctx, b.client, KeysFor(b.prefix, g.Key), g.Owner, tomb)
	switch {
	case err != nil:
		return err
	case !ok:
		return distlock.ErrNotHeld
	}
	return nil
}

// Subscribe implements driver.Notifier.
func (b *backend) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	return b.notifier.Subscribe(ctx, key)
}

// onConn runs fn on one connection to the master that owns k, so that a
// WAIT sent on it counts the script's write.
func (b *backend) onConn(ctx context.Context, k Keys, fn func(*goredis.Conn) error) error {
	var c *goredis.Client
	switch cl := b.client.(type) {
	case *goredis.Client:
		c = cl
	case *goredis.ClusterClient:
		m, err := cl.MasterForKey(ctx, k.Lock)
		if err != nil {
			return fmt.Errorf("cluster master for %q: %w", k.Lock, err)
		}
		c = m
	default: // ruled out by newBackend
		return fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, not %T", b.client)
	}
	conn := c.Conn()
	defer conn.Close()
	return fn(conn)
}

func (b *backend) waitReplicas(ctx context.Context, c *goredis.Conn) error {
	got, err := c.Wait(ctx, b.wait.n, b.wait.timeout).Result()
	if err != nil {
		return fmt.Errorf("WAIT %d %v: %w", b.wait.n, b.wait.timeout, err)
	}
	if got < int64(b.wait.n) {
		return fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, got, b.wait.n, b.wait.timeout)
	}
	return nil
}

// Close stops the notifier and, with WithCloseClient, closes the client.
func (b *backend) Close() error {
	b.closeOnce.Do(func() {
		b.closeErr = b.notifier.Close()
		if b.closeClient {
			b.closeErr = errors.Join(b.closeErr, b.client.Close())
		}
	})
	return b.closeErr
}

// As gives access to the client: target may be a *goredis.UniversalClient,
// a **goredis.Client or a **goredis.ClusterClient (when the client is one).
func (b *backend) As(target any) bool {
	switch p := target.(type) {
	case *goredis.UniversalClient:
		*p = b.client
		return true
	case **goredis.Client:
		c, ok := b.client.(*goredis.Client)
		if ok {
			*p = c
		}
		return ok
	case **goredis.ClusterClient:
		c, ok := b.client.(*goredis.ClusterClient)
		if ok {
			*p = c
		}
		return ok
	}
	return false
}

// open is the Opener of redis:// and rediss:// URLs. Parameters:
//
//	prefix=app:locks:     WithKeyPrefix
//	wait_replicas=1       WithWaitReplicas (with wait_timeout, default 1s)
//	wait_timeout=500ms
//	eviction=warn|refuse|ignore   WithEvictionCheck
//
// and every go-redis ParseURL parameter (db in the path, dial_timeout, …);
// anything else is an error. A URL without a host is ErrInvalidURL. The
// server must answer a PING within the dial timeout (default 5s, and never
// past ctx): otherwise Open fails with an error matching ErrUnavailable.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %s://… has no host (want %s://host:6379)", distlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: bad port %q", distlock.ErrInvalidURL, p)
		}
	}
	q := driver.NewQuery(u)
	var bopts []distlock.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p))
	}
	n, hasN := q.Int("wait_replicas")
	timeout, hasT := q.Duration("wait_timeout")
	if !hasT {
		timeout = time.Second
	}
	if hasN || hasT {
		bopts = append(bopts, WithWaitReplicas(n, timeout))
	}
	if s, ok := q.String("eviction"); ok {
		switch s {
		case "warn":
			bopts = append(bopts, WithEvictionCheck(EvictionWarn))
		case "refuse":
			bopts = append(bopts, WithEvictionCheck(EvictionRefuse))
		case "ignore":
			bopts = append(bopts, WithEvictionCheck(EvictionIgnore))
		default:
			return nil, fmt.Errorf("%w: parameter eviction=%q: want warn, refuse or ignore", distlock.ErrInvalidURL, s)
		}
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	opts = append(append(bopts, opts...), WithCloseClient(true))
	if _, err := driver.Resolve(driver.Settings{}, "redis", opts); err != nil {
		return nil, err // before dialling
	}
	// What is left is go-redis's to read (and to reject if unknown).
	u2 := *u
	u2.RawQuery = q.Rest().Encode()
	copt, err := goredis.ParseURL(u2.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", distlock.ErrInvalidURL, err)
	}
	copt.ContextTimeoutEnabled = true
	if copt.DialTimeout <= 0 || copt.DialTimeout > setupTimeout {
		copt.DialTimeout = setupTimeout
	}
	client := goredis.NewClient(copt)
	pctx, cancel := context.WithTimeout(ctx, copt.DialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, driver.Unavailable(copt.Addr, err)
	}
	b, err := newBackend(pctx, client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}
