package redisnode_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisnode"
	"github.com/distlock/distlock/internal/testserver"
)

// newClient returns a client whose socket I/O honours context deadlines.
func newClient(t testing.TB, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRaiseToken(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("raise:", "k")
	before := time.Now().Add(-time.Minute).UnixMicro() // the server's clock is this machine's
	r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, "")
	if err != nil || !r.Acquired || int64(r.Token) < before || int64(r.Token) > time.Now().Add(time.Minute).UnixMicro() {
		t.Fatalf("AcquireOn on a missing counter = %+v, %v; want a token from the server's TIME in µs", r, err)
	}
	seed := r.Token
	held, err := redisnode.AcquireOn(ctx, c, k, "you", time.Minute, "")
	if err != nil || held.Acquired || held.HolderTTL <= 0 || held.HolderTTL > time.Minute {
		t.Fatalf("AcquireOn on a held key = %+v, %v", held, err)
	}
	big := distlock.Token(1<<62 + 1) // beyond Lua's exact doubles
	for _, tc := range []struct {
		owner string
		token distlock.Token
		ok    bool
		want  string
	}{
		{"me", seed + 5, true, (seed + 5).String()},
		{"me", seed + 3, true, (seed + 5).String()}, // never lowered
		{"you", seed + 9, false, (seed + 5).String()},
		{"me", big, true, big.String()},
		{"me", big - 1, true, big.String()},
	} {
		ok, err := redisnode.RaiseTokenOn(ctx, c, k, tc.owner, tc.token, time.Minute, "")
		if err != nil || ok != tc.ok {
			t.Fatalf("RaiseTokenOn(%s, %d) = %v, %v; want %v", tc.owner, tc.token, ok, err, tc.ok)
		}
		if v := c.Get(ctx, k.Counter).Val(); v != tc.want {
			t.Fatalf("after RaiseTokenOn(%s, %d) the counter is %s, want %s", tc.owner, tc.token, v, tc.want)
		}
	}
	if ok, err := redisnode.RefreshOn(ctx, c, k, "you", time.Minute, false, 0); err != nil || ok {
		t.Fatalf("RefreshOn by another owner = %v, %v", ok, err)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "me", 0, false); err != nil || !ok {
		t.Fatalf("ReleaseOn = %v, %v", ok, err)
	}
	// A new owner: "you" was refused above, and a refused attempt stays
	// refused (a late copy of it must take nothing).
	r, err = redisnode.AcquireOn(ctx, c, k, "them", time.Millisecond/2, "") // rounds up to 1ms, not PX 0
	if err != nil || !r.Acquired || r.Token != big+1 {
		t.Fatalf("AcquireOn after raise = %+v, %v; want token %d", r, err, big+1)
	}
	// A counter ahead of the clock just increments, exactly past 2^53; one
	// behind the clock (a restart from an old snapshot, a lagging replica)
	// jumps to it.
	time.Sleep(5 * time.Millisecond)
	r, err = redisnode.AcquireOn(ctx, c, k, "me", time.Millisecond, "")
	if err != nil || !r.Acquired || r.Token != big+2 {
		t.Fatalf("AcquireOn with a counter ahead of the clock = %+v, %v; want %d", r, err, big+2)
	}
	time.Sleep(5 * time.Millisecond)
	if err := c.Set(ctx, k.Counter, "7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r, err = redisnode.AcquireOn(ctx, c, k, "me", time.Minute, "")
	if err != nil || !r.Acquired || int64(r.Token) < before {
		t.Fatalf("AcquireOn with a counter of 7 = %+v, %v; want a token from the server's clock", r, err)
	}
	// The same attempt sent again (a client retry after a lost reply) gets
	// its own lock and token back, not "held".
	again, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, "")
	if err != nil || !again.Acquired || again.Token != r.Token {
		t.Fatalf("AcquireOn resent by the same owner = %+v, %v; want acquired with token %d", again, err, r.Token)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "me", 0, false); err != nil || !ok {
		t.Fatalf("ReleaseOn = %v, %v", ok, err)
	}
	// A corrupt counter fails the acquire and leaves no lock behind.
	if err := c.Set(ctx, k.Counter, "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err == nil {
		t.Fatal("AcquireOn with a corrupt counter succeeded")
	}
	if n := c.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Fatal("a failed acquire left its lock behind")
	}
	// Nor does a counter of another type (the script sets the lock before
	// it reads the counter, so a failure there must not leave the lock).
	if err := c.Del(ctx, k.Counter).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, k.Counter, "f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err == nil {
		t.Fatal("AcquireOn with a hash for a counter succeeded")
	}
	if n := c.Exists(ctx, k.Lock).Val(); n != 0 {
		t.Fatal("a failed acquire (wrong-type counter) left its lock behind")
	}
	// A negative counter is below the clock, as INCR would have had it.
	if err := c.Set(ctx, k.Counter, "-5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired || r.Token < distlock.Token(before) {
		t.Fatalf("AcquireOn with a counter of -5 = %+v, %v; want a token from the server's clock", r, err)
	}
}

// A batch of refreshes is one pipeline; a server without the script (first
// use, SCRIPT FLUSH) gets it loaded and the batch sent again.
func TestRefreshManyAfterScriptFlush(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	var locks []redisnode.Refresh
	for i := range 3 {
		k := redisnode.KeysFor("batch:", fmt.Sprint("k", i))
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		locks = append(locks, redisnode.Refresh{Keys: k, Owner: "me", TTL: time.Minute})
	}
	locks = append(locks, redisnode.Refresh{Keys: locks[0].Keys, Owner: "someone else", TTL: time.Minute})
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ok, errs := redisnode.RefreshManyOn(ctx, c, locks)
	for i, want := range []bool{true, true, true, false} {
		if errs[i] != nil || ok[i] != want {
			t.Errorf("lock %d: ok %v, err %v; want ok %v", i, ok[i], errs[i], want)
		}
	}
	for i := range 3 {
		if ttl := c.PTTL(ctx, locks[i].Keys.Lock).Val(); ttl < 30*time.Second {
			t.Errorf("lock %d: PTTL %v after a refresh to 1m", i, ttl)
		}
	}
}

// A batched extend of many locks after a SCRIPT FLUSH: every lock gets its
// own verdict in its own place (extended, taken back, someone else's), a
// lock whose key has the wrong type fails alone, and a resent batch still
// reports its retakes.
func TestExtendMany(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	const n, broken = 150, 99
	var locks []redisnode.Extend
	want := make([]redisnode.Extended, n)
	for i := range n {
		k := redisnode.KeysFor("many:", fmt.Sprint("k", i))
		switch i % 3 {
		case 0: // ours: extended
			if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, ""); err != nil || !r.Acquired {
				t.Fatal(r, err)
			}
			want[i] = redisnode.ExtendRenewed
		case 1: // missing: taken back
			want[i] = redisnode.ExtendRetaken
		case 2: // someone else's: untouched
			if r, err := redisnode.AcquireOn(ctx, c, k, "other", time.Minute, ""); err != nil || !r.Acquired {
				t.Fatal(r, err)
			}
			want[i] = redisnode.ExtendHeldByOther
		}
		locks = append(locks, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute,
			Token: distlock.Token(1_000_000 + i), Nonce: fmt.Sprint("nonce", i)})
	}
	if err := c.Set(ctx, locks[broken].Keys.Holder, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, locks)
	for i := range n {
		if i == broken {
			if errs[i] == nil || !strings.Contains(errs[i].Error(), "WRONGTYPE") {
				t.Errorf("lock %d (wrong-type holder record): %v, %v; want a WRONGTYPE error", i, res[i], errs[i])
			}
			continue
		}
		if errs[i] != nil || res[i] != want[i] {
			t.Errorf("lock %d: %v, %v; want %v", i, res[i], errs[i], want[i])
		}
		l := locks[i]
		switch want[i] {
		case redisnode.ExtendHeldByOther:
			if v := c.Get(ctx, l.Keys.Lock).Val(); v != "other" {
				t.Errorf("lock %d: someone else's lock now %q", i, v)
			}
		default:
			if ttl := c.PTTL(ctx, l.Keys.Lock).Val(); ttl < 30*time.Second {
				t.Errorf("lock %d: PTTL %v after an extend to 1m", i, ttl)
			}
			if tok := c.HGet(ctx, l.Keys.Holder, "token").Val(); tok != fmt.Sprint(l.Token) {
				t.Errorf("lock %d: holder record token %q, want %d", i, tok, l.Token)
			}
		}
	}
	// A resent batch (its reply lost): the retaken locks still say so.
	res, errs = redisnode.ExtendManyOn(ctx, c, locks)
	for i := range n {
		if i != broken && (errs[i] != nil || res[i] != want[i]) {
			t.Errorf("resent, lock %d: %v, %v; want %v", i, res[i], errs[i], want[i])
		}
	}
}

// A batched extend of locks that are ours with their holder records (the
// steady state) runs only the fast path: after a SCRIPT FLUSH the
// repairing script is still not loaded. The fast path changes nothing where
// it does not apply: a lock whose record is another owner's, one taken back
// by this very refresh (a resend), one missing, someone else's; each gets
// the repairing script's verdict.
func TestExtendFastPath(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	repairing, fast := redisnode.ExtendScriptHashes()
	loaded := func() (bool, bool) {
		e, err := c.ScriptExists(ctx, repairing, fast).Result()
		if err != nil {
			t.Fatal(err)
		}
		return e[0], e[1]
	}
	var steady []redisnode.Extend
	for i := range 3 {
		k := redisnode.KeysFor("fast:", fmt.Sprint("k", i))
		if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Second, "v"); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		steady = append(steady, redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 7, Nonce: "n", Value: "v"})
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := redisnode.ExtendManyOn(ctx, c, steady)
	for i, l := range steady {
		if errs[i] != nil || res[i] != redisnode.ExtendRenewed {
			t.Errorf("steady lock %d: %v, %v; want renewed", i, res[i], errs[i])
		}
		for _, key := range []string{l.Keys.Lock, l.Keys.Holder} {
			if ttl := c.PTTL(ctx, key).Val(); ttl < 30*time.Second {
				t.Errorf("steady lock %d: PTTL of %s %v after an extend to 1m", i, key, ttl)
			}
		}
	}
	if r, f := loaded(); r || !f {
		t.Errorf("steady locks: repairing script loaded %v, fast path loaded %v; want only the fast path to run", r, f)
	}

	// Where the fast path does not apply.
	k := func(name string) redisnode.Keys { return redisnode.KeysFor("fast:", name) }
	stale := redisnode.Extend{Keys: k("stale-record"), Owner: "me", TTL: time.Minute, Token: 9, Nonce: "n1", Value: "mine"}
	if r, err := redisnode.AcquireOn(ctx, c, stale.Keys, "me", time.Second, ""); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if err := c.HSet(ctx, stale.Keys.Holder, "owner", "earlier", "token", "3", "value", "theirs").Err(); err != nil {
		t.Fatal(err)
	}
	missing := redisnode.Extend{Keys: k("missing"), Owner: "me", TTL: time.Minute, Token: 11, Nonce: "n2"}
	other := redisnode.Extend{Keys: k("other"), Owner: "me", TTL: time.Minute, Token: 12, Nonce: "n3"}
	if r, err := redisnode.AcquireOn(ctx, c, other.Keys, "someone", time.Minute, "x"); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	locks := []redisnode.Extend{stale, missing, other}
	want := []redisnode.Extended{redisnode.ExtendRenewed, redisnode.ExtendRetaken, redisnode.ExtendHeldByOther}
	for _, round := range []string{"first", "resent"} {
		res, errs := redisnode.ExtendManyOn(ctx, c, locks)
		for i := range locks {
			if errs[i] != nil || res[i] != want[i] {
				t.Errorf("%s: lock %d: %v, %v; want %v", round, i, res[i], errs[i], want[i])
			}
		}
	}
	if got := c.HGetAll(ctx, stale.Keys.Holder).Val(); got["owner"] != "me" || got["token"] != "9" || got["value"] != "mine" {
		t.Errorf("a record of an earlier owner under our lock: %v; want ours", got)
	}
	if got := c.Get(ctx, other.Keys.Lock).Val(); got != "someone" {
		t.Errorf("someone else's lock: %q", got)
	}
}

// The batched extend (extend_fast.lua, then extend.lua for the rest)
// against extend.lua alone (ExtendOn), over every combination of lock,
// holder record, retake marker and tombstone, wrong-typed keys included;
// first after a SCRIPT FLUSH, then resent with the same nonces. Outcome,
// error and every key's type, value and TTL must match. (A record of the
// wrong type is the subtle case: a fast path whose HGET fails on it differs
// from extend.lua, which reports a resent retake or extends the lock before
// failing.)
func TestExtendFastMatchesRepairing(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	type pair struct {
		name string
		a, b redisnode.Extend // batched side, ExtendOn side
	}
	setup := func(k redisnode.Keys, nonce, lock, record, marker, seq string, tomb bool) {
		short := 20 * time.Second // setting up every pair takes seconds under -race
		do := func(cmd interface{ Err() error }) {
			if err := cmd.Err(); err != nil {
				t.Fatal(err)
			}
		}
		switch lock {
		case "ours":
			do(c.Set(ctx, k.Lock, "me", short))
		case "other":
			do(c.Set(ctx, k.Lock, "x", short))
		case "wrongtype":
			do(c.HSet(ctx, k.Lock, "f", "v"))
			do(c.PExpire(ctx, k.Lock, short))
		}
		switch record {
		case "ours":
			do(c.HSet(ctx, k.Holder, "owner", "me", "token", "7", "value", "v"))
			do(c.PExpire(ctx, k.Holder, short))
		case "other":
			do(c.HSet(ctx, k.Holder, "owner", "x", "token", "3", "value", "w"))
			do(c.PExpire(ctx, k.Holder, short))
		case "noowner":
			do(c.HSet(ctx, k.Holder, "token", "7"))
			do(c.PExpire(ctx, k.Holder, short))
		case "wrongtype":
			do(c.Set(ctx, k.Holder, "s", short))
		}
		switch marker {
		case "nonce":
			do(c.Set(ctx, k.Retake, nonce, short))
		case "othernonce":
			do(c.Set(ctx, k.Retake, "old", short))
		case "wrongtype":
			do(c.HSet(ctx, k.Retake, "f", "v"))
			do(c.PExpire(ctx, k.Retake, short))
		}
		if tomb {
			do(c.Set(ctx, k.GoneFor("me"), "1", short))
		}
		switch seq { // the refresh below is number 5
		case "older":
			do(c.Set(ctx, k.Seq, "4:me", short))
		case "newer":
			do(c.Set(ctx, k.Seq, "6:me", short))
		case "other":
			do(c.Set(ctx, k.Seq, "9:x", short))
		case "wrongtype":
			do(c.HSet(ctx, k.Seq, "f", "v"))
			do(c.PExpire(ctx, k.Seq, short))
		}
	}
	var pairs []pair
	for _, lock := range []string{"missing", "ours", "other", "wrongtype"} {
		for _, record := range []string{"missing", "ours", "other", "noowner", "wrongtype"} {
			for _, marker := range []string{"missing", "nonce", "othernonce", "wrongtype"} {
				for _, seq := range []string{"missing", "older", "newer", "other", "wrongtype"} {
					for _, tomb := range []bool{false, true} {
						name := fmt.Sprintf("lock=%s,record=%s,marker=%s,seq=%s,tomb=%v", lock, record, marker, seq, tomb)
						nonce := "nonce-" + name
						var e [2]redisnode.Extend
						for side, prefix := range []string{"batch:", "single:"} {
							k := redisnode.KeysFor(prefix, name)
							setup(k, nonce, lock, record, marker, seq, tomb)
							e[side] = redisnode.Extend{Keys: k, Owner: "me", TTL: time.Minute, Token: 7, Nonce: nonce, Value: "v", Seq: 5}
						}
						pairs = append(pairs, pair{name, e[0], e[1]})
					}
				}
			}
		}
	}
	state := func(k redisnode.Keys) string {
		var out strings.Builder
		for _, key := range []string{k.Lock, k.Holder, k.Retake, k.GoneFor("me"), k.Counter, k.Seq} {
			typ := c.Type(ctx, key).Val()
			val := ""
			switch typ {
			case "string":
				val = c.Get(ctx, key).Val()
			case "hash":
				val = fmt.Sprint(c.HGetAll(ctx, key).Val())
			}
			ttl := c.PTTL(ctx, key).Val()
			class := "none"
			switch {
			case ttl > 40*time.Second:
				class = "extended"
			case ttl > 0:
				class = "short"
			case ttl == -1:
				class = "persistent"
			}
			fmt.Fprintf(&out, "[%s %s %s]", typ, val, class)
		}
		return out.String()
	}
	for round, what := range []string{"after SCRIPT FLUSH", "resent, same nonces"} {
		if round == 0 {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		batch := make([]redisnode.Extend, len(pairs))
		for i, p := range pairs {
			batch[i] = p.a
		}
		res, errs := redisnode.ExtendManyOn(ctx, c, batch)
		for i, p := range pairs {
			r, err := redisnode.ExtendOn(ctx, c, p.b.Keys, p.b.Owner, p.b.TTL, p.b.Token, p.b.Nonce, p.b.Value, p.b.Seq)
			sa, sb := state(p.a.Keys), state(p.b.Keys)
			if res[i] != r || (errs[i] == nil) != (err == nil) || sa != sb {
				t.Errorf("%s, %s:\n  batched: %v, %v, %s\n  extend.lua: %v, %v, %s", what, p.name, res[i], errs[i], sa, r, err, sb)
			}
		}
	}
}

// A tombstone is never shortened: two releases of one owner may arrive in
// either order (a failed attempt's give-back of each node, and the portable
// layer's give-back of the whole attempt), and the shorter one landing last
// let an acquire still on its way take the lock for nobody (CI, redlock's
// TestGiveBackCoversLateAcquires).
func TestTombstoneIsNeverShortened(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("tomb:", "k")
	for _, tomb := range []time.Duration{time.Minute, time.Second} {
		if _, err := redisnode.ReleaseOn(ctx, c, k, "me", tomb, true); err != nil {
			t.Fatal(err)
		}
	}
	if left := c.PTTL(ctx, k.GoneFor("me")).Val(); left < 50*time.Second {
		t.Fatalf("a 1s tombstone after a 1m one left %v; want the longer one kept", left)
	}
	r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, "")
	if err != nil || r.Acquired {
		t.Fatalf("a late acquire of the given-back owner = %+v, %v; want refused", r, err)
	}
}

// A refresh copy older than the newest refresh applied for the lease
// changes nothing (a late copy: go-redis resent it, the resend answered);
// a stale sequence of another owner (its lock deleted by hand) does not
// hold up a new lease's refreshes.
func TestRefreshSequenceRefusesOlderCopy(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("seq:", "k")
	if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	if ok, err := redisnode.RefreshOn(ctx, c, k, "me", 2*time.Minute, false, 2); err != nil || !ok {
		t.Fatalf("refresh 2 = %v, %v", ok, err)
	}
	if ok, err := redisnode.RefreshOn(ctx, c, k, "me", time.Second, false, 1); err != nil || !ok {
		t.Fatalf("late refresh 1 = %v, %v; want ours, unchanged", ok, err)
	}
	if left := c.PTTL(ctx, k.Lock).Val(); left < 100*time.Second {
		t.Fatalf("a late copy of refresh 1 cut the lock from refresh 2's 2m to %v", left)
	}
	// Refresh 2 again (a resend of the newest) and refresh 3 apply.
	if ok, err := redisnode.RefreshOn(ctx, c, k, "me", time.Second, false, 3); err != nil || !ok {
		t.Fatalf("refresh 3 = %v, %v", ok, err)
	}
	if left := c.PTTL(ctx, k.Lock).Val(); left > time.Second {
		t.Fatalf("refresh 3 (1s) left %v", left)
	}
	// Another owner's stale sequence (its lock deleted by hand).
	if err := c.Set(ctx, k.Lock, "you", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := redisnode.RefreshOn(ctx, c, k, "you", 2*time.Minute, false, 1); err != nil || !ok {
		t.Fatalf("another owner's refresh 1 over my sequence 3 = %v, %v", ok, err)
	}
	if left := c.PTTL(ctx, k.Lock).Val(); left < 100*time.Second {
		t.Fatalf("another owner's refresh 1 was held up by my sequence: %v left", left)
	}
}

// A release leaves its owner's tombstone with its outcome: a copy that
// comes again (resent after a lost reply, or late) reports what the first
// did and touches nobody else's lock.
func TestReleaseCopyReportsFirstOutcome(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("rel:", "k")
	if r, err := redisnode.AcquireOn(ctx, c, k, "me", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	for i := range 2 {
		if ok, err := redisnode.ReleaseOn(ctx, c, k, "me", time.Minute, false); err != nil || !ok {
			t.Fatalf("release copy %d = %v, %v; want released", i+1, ok, err)
		}
	}
	if r, err := redisnode.AcquireOn(ctx, c, k, "you", time.Minute, ""); err != nil || !r.Acquired {
		t.Fatalf("acquire by another = %+v, %v", r, err)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "me", time.Minute, false); err != nil || !ok {
		t.Fatalf("a late release copy of mine over another's lock = %v, %v; want my first outcome", ok, err)
	}
	if got := c.Get(ctx, k.Lock).Val(); got != "you" {
		t.Fatalf("a late release copy of mine touched another's lock: %q", got)
	}
	// A release that found the lock someone else's says so again.
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "them", time.Minute, false); err != nil || ok {
		t.Fatalf("release by a non-owner = %v, %v", ok, err)
	}
	if ok, err := redisnode.ReleaseOn(ctx, c, k, "them", time.Minute, false); err != nil || ok {
		t.Fatalf("its copy = %v, %v; want not released again", ok, err)
	}
}

// A copy of an older refresh that lands after a newer one ran, and after
// the lock the newer one set expired, must not take the lock back: the
// refresh sequence outlives the lock by the late bound.
func TestOlderExtendCopyAfterExpiryTakesNothing(t *testing.T) {
	srv := testserver.Redis(t)
	c := newClient(t, srv.Addr())
	ctx := t.Context()
	k := redisnode.KeysFor("older:", "k")
	r, err := redisnode.AcquireOn(ctx, c, k, "a", 10*time.Second, "")
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if got, err := redisnode.ExtendOn(ctx, c, k, "a", 200*time.Millisecond, r.Token, "n2", "", 2); err != nil || got != redisnode.ExtendRenewed {
		t.Fatal(got, err)
	}
	time.Sleep(300 * time.Millisecond)                                                // refresh 2's lock, and its sequence key, expire
	got, err := redisnode.ExtendOn(ctx, c, k, "a", time.Minute, r.Token, "n1", "", 1) // refresh 1, late
	if err != nil {
		t.Fatal(err)
	}
	if got != redisnode.ExtendHeldByOther {
		d, _ := c.PTTL(ctx, k.Lock).Result()
		t.Fatalf("a late copy of refresh 1, after refresh 2 ran and expired, answered %v: the lock is back for %v", got, d.Round(time.Second))
	}
}
