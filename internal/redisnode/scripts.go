package redisnode

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mutation"
)

// The lock scripts. go-redis's Script.Run sends EVALSHA and falls back to
// EVAL (which also reloads the script cache) on NOSCRIPT, so a SCRIPT FLUSH
// or a failover to a fresh replica costs one extra round trip, not an error.
var (
	//go:embed lua/acquire.lua
	acquireSrc string
	//go:embed lua/refresh.lua
	refreshSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/raise.lua
	raiseSrc string
	//go:embed lua/extend.lua
	extendSrc string
	//go:embed lua/extend_fast.lua
	extendFastSrc string
	//go:embed lua/dequeue.lua
	dequeueSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/acquire_token_restart.lua
	acquireTokenRestartSrc string // mutation: token-restart
	//go:embed lua/extend_no_repair.lua
	extendNoRepairSrc string // mutation: redlock-no-repair

	acquire       = newWordScript(mutation.Pick("token-restart", acquireTokenRestartSrc, acquireSrc)) // mutation: token-restart
	refreshScript = goredis.NewScript(refreshSrc)
	release       = newWordScript(releaseSrc)
	dequeue       = newWordScript(dequeueSrc)
	raise         = newWordScript(raiseSrc)
	extendSource  = mutation.Pick("redlock-no-repair", extendNoRepairSrc, extendSrc) // mutation: redlock-no-repair
	extendScript  = goredis.NewScript(extendSource)
	inspectScript = goredis.NewScript(inspectSrc)
)

// The scripts of batched calls, by their words.
var (
	refreshWords = newWordScript(refreshSrc)
	extendWords  = newWordScript(extendSource)
	extendFast   = newWordScript(extendFastSrc)
)

// Doer runs one command given as its words: a *goredis.Client, a
// *goredis.ClusterClient or a *goredis.Conn (not a pipeline).
type Doer interface {
	Do(ctx context.Context, args ...any) *goredis.Cmd
}

// wordScript is a script called with its command's words built by the
// caller in one slice (go-redis's Script.Run would copy keys and arguments
// into slices of its own and box every key again: four to six allocations a
// call). The first two words are left for the command and the script.
// A slice given to Do becomes the command's own, which hooks may rewrite in
// place (a key-prefixing hook does): every send gets freshly built words.
type wordScript struct {
	src  string
	hash any // boxed once
}

func newWordScript(src string) wordScript {
	return wordScript{src: src, hash: goredis.NewScript(src).Hash()}
}

// words fills in the first two words: EVALSHA and the hash, or, on a resend
// after NOSCRIPT, EVAL and the source. EVAL is routed like any command with
// keys (a Ring's or a proxy's SCRIPT LOAD reaches one shard) and loads the
// script where it ran.
func (s wordScript) words(w []any, noScript bool) []any {
	if noScript {
		w[0], w[1] = "eval", s.src
	} else {
		w[0], w[1] = "evalsha", s.hash
	}
	return w
}

// run sends the script with the words build makes (from the third on: the
// key count, the keys, the arguments), and, if the server lacks the script
// (first use, a restart, SCRIPT FLUSH), once more with new words as EVAL.
func (s wordScript) run(ctx context.Context, c Doer, build func() []any) *goredis.Cmd {
	cmd := c.Do(ctx, s.words(build(), false)...)
	if err := cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") { // HasErrorPrefix allocates
		cmd = c.Do(ctx, s.words(build(), true)...)
	}
	return cmd
}

// AcquireResult is the outcome of one acquire script run.
type AcquireResult struct {
	// Acquired is true when the lock was free and is now held by owner.
	Acquired bool
	// Token is the new fencing token (counter value) when Acquired.
	Token distlock.Token
	// HolderTTL is the current holder's remaining time when not Acquired;
	// zero or negative when the server did not report one.
	HolderTTL time.Duration
}

// The functions below are the node-level surface: each runs one script, in
// one round trip, on one client or *goredis.Conn (not a pipeline), and
// neither retries nor validates. The single-Redis backend
// is built on them; the Redlock backend runs them on each of its nodes.

// AcquireOn runs the acquire script: if k.Lock is free, SET it to owner for
// ttl and advance k.Counter to max(counter+1, the server's TIME in µs),
// returning it as the token; if k.Lock already holds owner (a resent
// attempt), return the counter. When the lock is held it returns the
// holder's PTTL instead. A non-empty value is written, with owner and the
// token, to the holder record k.Holder, which expires with the lock; with
// "" the record is not touched.
func AcquireOn(ctx context.Context, c Doer, k Keys, owner string, ttl time.Duration, value string) (AcquireResult, error) {
	gone, ms, tomb := k.GoneFor(owner), millis(ttl), millis(MaxLate)
	return acquireResult(acquire.run(ctx, c, func() []any { return acquireWords(k, gone, owner, ms, tomb, value) }))
}

func acquireWords(k Keys, gone, owner string, ms, tomb int64, value string) []any {
	if value == "" {
		return []any{nil, nil, 3, k.Lock, k.Counter, gone, owner, ms, tomb, counterLife(ms)}
	}
	return []any{nil, nil, 4, k.Lock, k.Counter, gone, k.Holder, owner, ms, tomb, counterLife(ms), value}
}

// MaxLate is the longest a request may be held up in the network (a
// congested link, a proxy, a segment in retransmission) and still be
// refused when it lands: what a node remembers of a lease or an attempt
// outlives the decision by this much (a release's tombstone, a refused
// attempt) or outlives the lock (a refresh sequence). A copy sent before
// the decision and later than that may still land.
const MaxLate = distlock.DefaultReleaseTimeout

// GiveBackTombstone is how long the give-back of an attempt whose outcome is
// unknown (no answer came) remembers it: the attempt may be queued at a
// slow or paused server, which can run it long after, so for its TTL as
// well as MaxLate.
func GiveBackTombstone(ttl time.Duration) time.Duration { return ttl + MaxLate }

// CounterLinger is how long a key's token counter outlives its last lock.
// A counter that has expired is not needed: the next token comes from the
// server's clock in µs, past every earlier token unless the clock steps
// back by more than this, so a key locked once leaves nothing behind for
// long (see acquire.lua).
const CounterLinger = time.Hour

// counterLife is a counter's expiry after a grant or refresh of a lock of
// ttlMS milliseconds.
func counterLife(ttlMS int64) int64 { return ttlMS + CounterLinger.Milliseconds() }

// seqLife is how long a refresh's sequence lasts: its lock's TTL and MaxLate.
func seqLife(ttl time.Duration) int64 { return millis(ttl + MaxLate) }

// A Call is one script call's words, built (and each argument boxed) once
// and sent to many nodes, as Redlock's rounds are: each send gets a copy of
// the slice, since a command's words are its own (see wordScript).
type Call struct {
	script wordScript
	words  []any
	err    error // a bad argument, returned by every send
}

func (c Call) send(ctx context.Context, d Doer) *goredis.Cmd {
	return c.script.run(ctx, d, func() []any { return slices.Clone(c.words) })
}

// AcquireCall is AcquireOn's call, to send with Acquire.
func AcquireCall(k Keys, owner string, ttl time.Duration, value string) Call {
	return Call{script: acquire, words: acquireWords(k, k.GoneFor(owner), owner, millis(ttl), millis(MaxLate), value)}
}

// Acquire sends an AcquireCall to one node: AcquireOn.
func (c Call) Acquire(ctx context.Context, d Doer) (AcquireResult, error) {
	return acquireResult(c.send(ctx, d))
}

// AcquireFairOn is AcquireOn for one attempt of a waiting Acquire in a
// fair queue: the lock is taken only if no live waiter came before waiter
// (the same on every attempt of that Acquire); otherwise waiter is queued
// (or stays queued) and HolderTTL says how long to wait: the holder's PTTL,
// or, while the lock is free, the first waiter's time left to take it. A
// waiter's place lapses window after the time it was told to wait.
func AcquireFairOn(ctx context.Context, c Doer, k Keys, owner string, ttl time.Duration, value, waiter string, window time.Duration) (AcquireResult, error) {
	gone, ms, tomb := k.GoneFor(owner), millis(ttl), millis(MaxLate)
	waiters, deadlines := k.Queue()
	return acquireResult(acquire.run(ctx, c, func() []any {
		return []any{nil, nil, 6, k.Lock, k.Counter, gone, k.Holder, waiters, deadlines, owner, ms, tomb, counterLife(ms), value, waiter, millis(window), k.Channel}
	}))
}

// DequeueOn takes waiter out of k's fair queue (its Acquire ended without
// the lock), and wakes the next waiter if it was first and the lock is
// free. It reports whether waiter was queued.
func DequeueOn(ctx context.Context, c Doer, k Keys, waiter string) (bool, error) {
	waiters, deadlines := k.Queue()
	n, err := dequeue.run(ctx, c, func() []any {
		return []any{nil, nil, 3, k.Lock, waiters, deadlines, waiter, k.Channel}
	}).Int64()
	if err != nil {
		return false, fmt.Errorf("dequeue script: %w", err)
	}
	return n == 1, nil
}

// acquireResult decodes the acquire script's one value: the token (a
// decimal string) when taken, the holder's PTTL (an integer) when held.
func acquireResult(cmd *goredis.Cmd) (AcquireResult, error) {
	v, err := cmd.Result()
	if err != nil {
		if errors.Is(err, goredis.Nil) {
			err = errors.New("no token counter for a resent attempt")
		}
		return AcquireResult{}, fmt.Errorf("acquire script: %w", err)
	}
	switch v := v.(type) {
	case int64:
		return AcquireResult{HolderTTL: time.Duration(v) * time.Millisecond}, nil
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return AcquireResult{Acquired: true, Token: distlock.Token(n)}, nil
		}
	}
	return AcquireResult{}, fmt.Errorf("acquire script: unexpected reply %v", v)
}

// RefreshOn runs the refresh script: PEXPIRE k.Lock ttl if it still holds
// owner, and k.Holder with it when withValue (the lock was taken with a
// value, so AcquireOn wrote the record). seq numbers the lease's refreshes
// (from 1, in the order they are sent): a refresh that lands after a
// higher-numbered one ran changes nothing. It reports whether the lock was
// ours.
func RefreshOn(ctx context.Context, c goredis.Scripter, k Keys, owner string, ttl time.Duration, withValue bool, seq uint64) (bool, error) {
	n, err := refreshScript.Run(ctx, c, refreshKeys(k, withValue), owner, millis(ttl), seqArg(seq), seqLife(ttl),
		counterLife(millis(ttl))).Int64()
	if err != nil {
		return false, fmt.Errorf("refresh script: %w", err)
	}
	return n == 1, nil
}

// seqArg is a refresh's sequence number as a script argument.
func seqArg(seq uint64) string {
	if mutation.On("refresh-unordered") { // mutation: refresh-unordered
		seq = 0 // every copy of every refresh applies, in the order it lands
	}
	return strconv.FormatUint(seq, 10)
}

// Refresh is one lock of RefreshManyOn: the arguments of RefreshOn.
type Refresh struct {
	Keys      Keys
	Owner     string
	TTL       time.Duration
	WithValue bool   // the lock was taken with a value: extend its holder record too
	Seq       uint64 // the lease's refresh number (see RefreshOn)
}

// refreshKeys are the refresh script's keys: the lock, the lease's refresh
// sequence, and the holder record only when there is one to extend.
func refreshKeys(k Keys, withValue bool) []string {
	if withValue {
		return []string{k.Lock, k.Seq, k.Counter, k.Holder}
	}
	return []string{k.Lock, k.Seq, k.Counter}
}

// RefreshManyOn runs the refresh script for every lock, all in one
// pipeline: ok[i] reports whether lock i was still ours, errs[i] its own
// failure. If the server does not have the script (first use, a restart,
// SCRIPT FLUSH), those locks are sent again as EVAL: extending twice is
// harmless.
// Each lock is a script call of its own: its keys share one hash slot, a
// call mixing locks would not (a cluster refuses it; a ring or a proxy
// routes it by its first key, to one shard, where the other locks are not).
func RefreshManyOn(ctx context.Context, c goredis.UniversalClient, locks []Refresh) (ok []bool, errs []error) {
	calls := make(batch, len(locks))
	for i, l := range locks {
		if l.WithValue {
			calls[i] = []any{nil, nil, 4, l.Keys.Lock, l.Keys.Seq, l.Keys.Counter, l.Keys.Holder, l.Owner, millis(l.TTL), seqArg(l.Seq),
				seqLife(l.TTL), counterLife(millis(l.TTL))}
		} else {
			calls[i] = []any{nil, nil, 3, l.Keys.Lock, l.Keys.Seq, l.Keys.Counter, l.Owner, millis(l.TTL), seqArg(l.Seq),
				seqLife(l.TTL), counterLife(millis(l.TTL))}
		}
	}
	ok = make([]bool, len(locks))
	errs = make([]error, len(locks))
	calls.send(ctx, c, refreshWords, "refresh", all(len(locks)), errs, func(i int, n int64) error {
		ok[i] = n == 1
		return nil
	})
	return ok, errs
}

// Extend is one lock of ExtendManyOn: the arguments of ExtendOn.
type Extend struct {
	Keys  Keys
	Owner string
	TTL   time.Duration
	Token distlock.Token
	Nonce string
	Value string
	Seq   uint64 // the lease's refresh number (see RefreshOn)
}

// ExtendManyOn runs Redlock's repairing refresh (ExtendOn) for every lock,
// pipelined as RefreshManyOn pipelines refreshes; a resend after a lost
// script is harmless for the same reason a resent ExtendOn is (the nonce).
func ExtendManyOn(ctx context.Context, c goredis.UniversalClient, locks []Extend) (res []Extended, errs []error) {
	return NewExtendBatch(locks).On(ctx, c)
}

// ExtendBatch is ExtendManyOn's script calls, built once so that Redlock
// sends the same calls to every node without building them per node. On
// may run on several nodes at once.
type ExtendBatch struct {
	locks []Extend
	fast  batch // the locks' calls of extend_fast.lua; nil for a lock refused before sending (negative token)
}

// NewExtendBatch builds the script calls that extend locks.
func NewExtendBatch(locks []Extend) *ExtendBatch {
	fast := make(batch, len(locks))
	for i, l := range locks {
		if l.Token < 0 {
			continue // as ExtendOn: On reports it
		}
		fast[i] = []any{nil, nil, 4, l.Keys.Lock, l.Keys.Holder, l.Keys.Retake, l.Keys.Seq, l.Owner, millis(l.TTL), l.Nonce, seqArg(l.Seq),
			seqLife(l.TTL)}
	}
	return &ExtendBatch{locks: locks, fast: fast}
}

// On runs the batch on one node, as ExtendManyOn does: one script call
// per lock, routed by that lock's keys. (A call carrying many locks was
// tried twice and broken twice: it reaches one server, where a Ring, a
// cluster or a proxy routing by first key does not keep the other locks,
// and a proxy that routes a key elsewhere for a while leaves a stale copy
// there that such a call extends and reports held.) Each lock first gets
// the short extend_fast.lua, which extends a lock and holder record that
// are both ours (the steady state, at about three quarters of extend.lua's
// server time); only the others get extend.lua, in a second round trip,
// with words built for that node then (in the steady state, never).
func (b *ExtendBatch) On(ctx context.Context, c goredis.UniversalClient) (res []Extended, errs []error) {
	res = make([]Extended, len(b.fast))
	errs = make([]error, len(b.fast))
	todo := make([]int, 0, len(b.fast))
	for i, call := range b.fast {
		if call == nil {
			errs[i] = errors.New("extend script: negative token")
		} else {
			todo = append(todo, i)
		}
	}
	var rest []int
	b.fast.send(ctx, c, extendFast, "extend", todo, errs, func(i int, n int64) error {
		switch n {
		case 1:
			res[i] = ExtendRenewed
		case -1:
			rest = append(rest, i)
		default:
			return fmt.Errorf("extend script: unexpected reply %d", n)
		}
		return nil
	})
	if len(rest) == 0 {
		return res, errs
	}
	repair := make(batch, len(b.locks))
	for _, i := range rest {
		l := b.locks[i]
		repair[i] = []any{nil, nil, 6, l.Keys.Lock, l.Keys.Counter, l.Keys.GoneFor(l.Owner), l.Keys.Retake,
			l.Keys.Holder, l.Keys.Seq, l.Owner, millis(l.TTL), strconv.FormatInt(int64(l.Token), 10), l.Nonce, l.Value, seqArg(l.Seq),
			seqLife(l.TTL), counterLife(millis(l.TTL))}
	}
	repair.send(ctx, c, extendWords, "extend", rest, errs, func(i int, n int64) error {
		if n < 0 || n > 2 {
			return fmt.Errorf("extend script: unexpected reply %d", n)
		}
		res[i] = Extended(n)
		return nil
	})
	return res, errs
}

// all is the indexes 0..n-1.
func all(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// batch is the words of one script call per lock (the first two left for
// the command and the script), built once and only read: each send, to
// each node, copies them, since hooks may rewrite a command's words in
// place (one allocation a call, where building them is several).
type batch [][]any

// send runs the calls todo (indexes into b) in one pipeline; got takes
// lock i's integer reply, and errs[i] gets lock i's error. The calls that
// met NOSCRIPT (first use, a restart, SCRIPT FLUSH) are sent again, once,
// as EVAL: routed per lock, and loading the script on the shard where it
// runs.
func (b batch) send(ctx context.Context, c goredis.UniversalClient, s wordScript, name string,
	todo []int, errs []error, got func(i int, n int64) error) {
	for round := 0; len(todo) > 0; round++ {
		cmds := make([]*goredis.Cmd, len(todo))
		pipe := c.Pipeline()
		for j, i := range todo {
			cmds[j] = pipe.Do(ctx, s.words(slices.Clone(b[i]), round > 0)...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own outcome
		var again []int
		for j, i := range todo {
			n, err := cmds[j].Int64()
			switch {
			case err != nil && round == 0 && goredis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, i)
			case err != nil:
				errs[i] = fmt.Errorf("%s script: %w", name, err)
			default:
				errs[i] = got(i, n)
			}
		}
		todo = again
	}
}

// ReleaseOn runs the release script: DEL k.Lock if it still holds owner
// (and the holder record k.Holder with it, when withRecord: the lock may
// have one), and PUBLISH an empty notice on k.Channel. It reports whether
// the lock was ours.
// A positive tombstone makes the node refuse, for that long, a late acquire
// or Redlock retake by owner (a request still on its way), and makes a
// copy of this release that comes again (go-redis resent it after a lost
// reply) report what the first copy did; zero leaves no tombstone.
func ReleaseOn(ctx context.Context, c Doer, k Keys, owner string, tombstone time.Duration, withRecord bool) (bool, error) {
	return releaseOn(ctx, c, k, owner, tombstone, withRecord, 0)
}

// ReleaseFairOn is ReleaseOn for a lock whose key may have a fair queue:
// its first waiter, if any, then has window from the release to take the
// lock, past which its place lapses, and a notice of its own wakes it (see
// SubscribeWaiter).
func ReleaseFairOn(ctx context.Context, c Doer, k Keys, owner string, tombstone time.Duration, withRecord bool, window time.Duration) (bool, error) {
	return releaseOn(ctx, c, k, owner, tombstone, withRecord, window)
}

func releaseOn(ctx context.Context, c Doer, k Keys, owner string, tombstone time.Duration, withRecord bool, window time.Duration) (bool, error) {
	tomb, gone := releaseTomb(k, owner, tombstone)
	return releaseResult(release.run(ctx, c, func() []any {
		return releaseWords(k, owner, tomb, gone, withRecord, window)
	}))
}

// releaseTomb is the tombstone's PX in milliseconds and its key.
func releaseTomb(k Keys, owner string, tombstone time.Duration) (ms, key string) {
	if tombstone > 0 {
		return strconv.FormatInt(millis(tombstone), 10), k.GoneFor(owner)
	}
	return "0", k.Lock // without a tombstone the script leaves KEYS[2] alone: no name to build
}

func releaseWords(k Keys, owner, tomb, gone string, withRecord bool, window time.Duration) []any {
	switch {
	case window > 0:
		waiters, deadlines := k.Queue()
		record := "0"
		if withRecord {
			record = "1"
		}
		return []any{nil, nil, 6, k.Lock, gone, k.Seq, k.Holder, waiters, deadlines, owner, k.Channel, tomb, millis(window), record}
	case withRecord:
		return []any{nil, nil, 4, k.Lock, gone, k.Seq, k.Holder, owner, k.Channel, tomb}
	}
	return []any{nil, nil, 3, k.Lock, gone, k.Seq, owner, k.Channel, tomb}
}

func releaseResult(cmd *goredis.Cmd) (bool, error) {
	n, err := cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("release script: %w", err)
	}
	return n == 1, nil
}

// ReleaseCall is ReleaseOn's call, to send with Release.
func ReleaseCall(k Keys, owner string, tombstone time.Duration, withRecord bool) Call {
	tomb, gone := releaseTomb(k, owner, tombstone)
	return Call{script: release, words: releaseWords(k, owner, tomb, gone, withRecord, 0)}
}

// Release sends a ReleaseCall to one node: ReleaseOn.
func (c Call) Release(ctx context.Context, d Doer) (bool, error) {
	return releaseResult(c.send(ctx, d))
}

// RaiseTokenOn runs Redlock's phase-2 script: if k.Lock still holds owner,
// raise k.Counter to at least token (never lowering it), write the holder
// record k.Holder (owner, token, value) for ttl, the lock's TTL, and report
// true; otherwise change nothing and report false.
func RaiseTokenOn(ctx context.Context, c Doer, k Keys, owner string, token distlock.Token, ttl time.Duration, value string) (bool, error) {
	return RaiseTokenCall(k, owner, token, ttl, value).RaiseToken(ctx, c)
}

// RaiseTokenCall is RaiseTokenOn's call, to send with RaiseToken.
func RaiseTokenCall(k Keys, owner string, token distlock.Token, ttl time.Duration, value string) Call {
	if token < 0 {
		return Call{err: errors.New("raise script: negative token")}
	}
	return Call{script: raise, words: []any{nil, nil, 3, k.Lock, k.Counter, k.Holder, owner, strconv.FormatInt(int64(token), 10), millis(ttl), value,
		counterLife(millis(ttl))}}
}

// RaiseToken sends a RaiseTokenCall to one node: RaiseTokenOn.
func (c Call) RaiseToken(ctx context.Context, d Doer) (bool, error) {
	if c.err != nil {
		return false, c.err
	}
	n, err := c.send(ctx, d).Int64()
	if err != nil {
		return false, fmt.Errorf("raise script: %w", err)
	}
	return n == 1, nil
}

// Extended is the outcome of ExtendOn on one node.
type Extended int

// ExtendOn outcomes.
const (
	ExtendHeldByOther Extended = iota // someone else holds the lock: nothing changed
	ExtendRenewed                     // it was ours and is extended
	ExtendRetaken                     // it was missing and is ours again
)

// ExtendOn runs Redlock's repairing refresh: PEXPIRE k.Lock ttl if it holds
// owner; if k.Lock is missing (and owner has not released it), SET it to
// owner for ttl and raise k.Counter to at least token. Either way the
// holder record k.Holder (owner, token, value) lasts as long as the lock:
// extended with it, or written where it is missing or another owner's.
// nonce, unique to the refresh, lets a resent call still report
// ExtendRetaken; seq numbers the lease's refreshes, as for RefreshOn.
func ExtendOn(ctx context.Context, c goredis.Scripter, k Keys, owner string, ttl time.Duration, token distlock.Token, nonce, value string, seq uint64) (Extended, error) {
	if token < 0 {
		return 0, errors.New("extend script: negative token")
	}
	n, err := extendScript.Run(ctx, c, extendKeys(k, owner), owner, millis(ttl),
		strconv.FormatInt(int64(token), 10), nonce, value, seqArg(seq), seqLife(ttl), counterLife(millis(ttl))).Int64()
	if err != nil {
		return 0, fmt.Errorf("extend script: %w", err)
	}
	if n < 0 || n > 2 {
		return 0, fmt.Errorf("extend script: unexpected reply %d", n)
	}
	return Extended(n), nil
}

// extendKeys are the extend script's keys.
func extendKeys(k Keys, owner string) []string {
	return []string{k.Lock, k.Counter, k.GoneFor(owner), k.Retake, k.Holder, k.Seq}
}

// millis converts a TTL to whole milliseconds, rounding up so that a
// sub-millisecond TTL does not become the invalid PX 0.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 || ms == 0 {
		ms++
	}
	return ms
}
