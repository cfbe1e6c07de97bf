package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pgerr"
)

// backend implements driver.Backend on a lock table, with release notices.
type backend struct {
	driver.Unsupported
	pool      *pgxpool.Pool // shared; closed by Close only when closePool
	sql       *statements
	addr      string // names the server in errors (never a secret)
	closePool bool
	notices   *listener // nil with WithNotify(false)

	channelMu sync.Mutex
	channel   string // the table's release channel, once named
}

// handle is a grant's state: what a lease-bound transaction checks.
type handle struct {
	sql        *statements
	key, owner string
	token      int64
}

// As sets *LeaseRow to the lock's row, for WithLease.
func (h *handle) As(target any) bool {
	if r, ok := target.(*LeaseRow); ok {
		*r = LeaseRow{sql: h.sql, Key: h.key, Owner: h.owner, Token: distlock.Token(h.token)}
		return true
	}
	return false
}

// conflictRetry is how soon an attempt that hit a serialization failure
// or a deadlock is tried again: well within a waiter's queueWindow.
const conflictRetry = time.Millisecond

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

func (b *backend) TryLock(ctx context.Context, req driver.Request) (driver.Grant, error) {
	waiter := req.Waiter
	if b.notices == nil {
		waiter = "" // a queue whose first waiter only polls would stall every hand-off
	}
	if waiter == "" || req.Owner == waiter { // TryAcquire, or a waiting Acquire's first attempt
		g, err := b.attempt(ctx, b.sql.acquire, req, waiter)
		if waiter == "" || !errors.Is(err, distlock.ErrNotAcquired) {
			return g, err
		}
	}
	return b.attempt(ctx, b.sql.acquireQueue, req, waiter) // join the queue, or keep the place
}

// attempt runs one acquire statement: a grant, or a HeldError with the
// time to wait.
func (b *backend) attempt(ctx context.Context, query string, req driver.Request, waiter string) (driver.Grant, error) {
	var token, left int64
	err := b.pool.QueryRow(ctx, query, req.Key, req.Owner, micros(req.TTL), []byte(req.Value), waiter).Scan(&token, &left)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // held by a grant our snapshot does not show yet
		return driver.Grant{}, &distlock.HeldError{Key: req.Key}
	case pgerr.Conflict(err): // REPEATABLE READ or SERIALIZABLE: the row changed under the attempt
		// The key's state moved while the attempt ran: look again soon, or
		// a waiter whose turn came sleeps through its place.
		return driver.Grant{}, &distlock.HeldError{Key: req.Key, RetryAfter: conflictRetry}
	case err != nil:
		return driver.Grant{}, b.classify("acquire", err)
	case token == 0:
		return driver.Grant{}, &distlock.HeldError{Key: req.Key, RetryAfter: time.Duration(left) * time.Microsecond}
	}
	return driver.Grant{Token: token, Handle: &handle{sql: b.sql, key: req.Key, owner: req.Owner, token: token}}, nil
}

func (b *backend) Refresh(ctx context.Context, g driver.Grant, ttl time.Duration) (time.Duration, error) {
	tag, err := b.pool.Exec(ctx, b.sql.refresh, g.Key, g.Owner, g.Token, micros(ttl))
	if err != nil {
		return 0, b.classify("refresh", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, fmt.Errorf("%w: postgres: %q expired or taken over", distlock.ErrNotHeld, g.Key)
	}
	return ttl, nil
}

// RefreshBatch refreshes the batch in one statement.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) error {
	keys := make([]string, len(batch))
	owners := make([]string, len(batch))
	tokens := make([]int64, len(batch))
	ttls := make([]int64, len(batch))
	for i, r := range batch {
		keys[i], owners[i], tokens[i], ttls[i] = r.Grant.Key, r.Grant.Owner, r.Grant.Token, micros(r.TTL)
	}
	rows, err := b.pool.Query(ctx, b.sql.refreshBatch, keys, owners, tokens, ttls)
	if err != nil {
		return b.classify("refresh", err)
	}
	type grant struct {
		key, owner string
		token      int64
	}
	done := map[grant]bool{}
	var g grant
	_, err = pgx.ForEachRow(rows, []any{&g.key, &g.owner, &g.token}, func() error { done[g] = true; return nil })
	if err != nil {
		return b.classify("refresh", err)
	}
	refreshed := make([]bool, len(batch))
	for i := range batch {
		refreshed[i] = done[grant{keys[i], owners[i], tokens[i]}]
	}
	for i := range batch {
		if refreshed[i] {
			batch[i].Validity = batch[i].TTL
		} else {
			batch[i].Err = fmt.Errorf("%w: postgres: %q expired or taken over", distlock.ErrNotHeld, batch[i].Grant.Key)
		}
	}
	return nil
}

func (b *backend) Unlock(ctx context.Context, g driver.Grant) error {
	if g.Handle == nil { // an attempt whose outcome is unknown
		_, err := b.pool.Exec(ctx, b.sql.giveBack, g.Key, g.Owner, b.notifyOn(ctx))
		if pgerr.Conflict(err) { // taken nothing yet: the portable layer asks again
			return fmt.Errorf("%w: postgres: give back %q: %w", distlock.ErrNotHeld, g.Key, err)
		}
		return b.classify("give back", err)
	}
	tag, err := b.pool.Exec(ctx, b.sql.release, g.Key, g.Owner, g.Token, b.notifyOn(ctx))
	if err != nil {
		return b.classify("release", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: postgres: %q expired or taken over", distlock.ErrNotHeld, g.Key)
	}
	return nil
}

func (b *backend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	var h driver.Holder
	var left int64
	var value []byte
	var waiters int64
	err := b.pool.QueryRow(ctx, b.sql.inspect, key).Scan(&h.Held, &h.Token, &value, &left, &waiters)
	if b.notices == nil {
		waiters = -1 // no queue
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return driver.Holder{Waiters: int(waiters)}, nil
	case err != nil:
		return driver.Holder{}, b.classify("inspect", err)
	case !h.Held:
		return driver.Holder{Waiters: int(waiters)}, nil
	}
	h.Value = string(value)
	h.TTL = max(time.Duration(left)*time.Microsecond, time.Microsecond)
	h.Waiters = int(waiters)
	return h, nil
}

// channelName names the table's release channel through the pool, once.
// Releases pass "" (no notice) while it cannot: every Locker of the table
// notifies, whether or not it listens.
func (b *backend) channelName(ctx context.Context) (string, error) {
	b.channelMu.Lock()
	defer b.channelMu.Unlock()
	if b.channel != "" {
		return b.channel, nil
	}
	err := b.pool.QueryRow(ctx, b.sql.channel).Scan(&b.channel)
	return b.channel, err
}

// notifyOn is the channel a release statement notifies on.
func (b *backend) notifyOn(ctx context.Context) string {
	c, _ := b.channelName(ctx)
	return c
}

// Dequeue takes waiter out of key's queue, and wakes the next waiter if the
// key is free.
func (b *backend) Dequeue(ctx context.Context, key, waiter string) error {
	_, err := b.pool.Exec(ctx, b.sql.dequeue, key, waiter, b.notifyOn(ctx))
	return b.classify("leave the queue", err)
}

func (b *backend) Subscribe(ctx context.Context, key string) (driver.Subscription, error) {
	if b.notices == nil {
		return nil, driver.ErrUnsupported
	}
	return b.notices.subscribe(ctx, key)
}

var guarantees = driver.Guarantees{
	Backend:           "postgres",
	TokenSource:       "the lock row: max(last token + 1, database clock in µs)",
	Wait:              driver.WaitNotify,
	FIFO:              true,
	FailuresTolerated: 0,
	RestartLosesLocks: true,
	Notes: []string{
		"expiry is judged by the database's clock; locks survive a restart of a durable server",
		"a failover to an asynchronous replica may drop the latest grants; tokens still rise if the new primary's clock is past them",
		"WithLease runs a transaction that commits only while the lease holds, by the database's clock",
		"waiting Acquires take a key in the order they came (not with WithNotify(false)); TryAcquire takes a free key whoever waits",
	},
}

func (b *backend) Guarantees() driver.Guarantees {
	g := guarantees
	g.FIFO = b.notices != nil
	return g
}

func (b *backend) Close() error {
	if b.notices != nil {
		b.notices.close()
	}
	if b.closePool {
		b.pool.Close()
	}
	return nil
}

// As reaches the pool: *(*pgxpool.Pool).
func (b *backend) As(target any) bool {
	if p, ok := target.(**pgxpool.Pool); ok {
		*p = b.pool
		return true
	}
	return false
}

// classify wraps err of what the backend was doing: a refusal of the role
// or of the certificate matches ErrAccessDenied, a server not reached
// ErrUnavailable.
func (b *backend) classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case pgerr.Denied(err):
		return driver.AccessDenied(b.addr, fmt.Errorf("postgres: %s: %w", what, err))
	case pgerr.Answered(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("postgres: %s: %w", what, err)
	}
	return driver.Unavailable(b.addr, fmt.Errorf("postgres: %s: %w", what, err))
}
