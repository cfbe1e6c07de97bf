package postgres

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mutation"
)

// DefaultTable is the lock table used when WithTable is not given.
const DefaultTable = "distlock_locks"

// queueWindow is how long a waiter's place lasts past the time it was told
// to wait: the holder's expiry, or, once the key is free, the moment it
// was told that another waiter comes first.
const queueWindow = 250 * time.Millisecond

// maxRefused is how many owners of given-back attempts a row remembers.
const maxRefused = 64

// tableName is a table name: an unquoted identifier, optionally
// schema-qualified, lower case so that it reads the same quoted or not.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// leaseExpiredCode is the SQLSTATE of WithLease's commit-time check.
const leaseExpiredCode = "DL001"

// statements are the SQL of one lock table. Every lock is a row; a free
// lock keeps its row (owner NULL) so that its token keeps rising.
//
// Tokens are max(the key's last token + 1, the database clock in
// microseconds): they rise per key across restarts, and across a failover
// to a replica that missed the latest grants as long as the new primary's
// clock is past the lost grants' time.
//
// refused holds the owners of the last maxRefused attempts given back
// without an answer: a copy of one of them landing late takes nothing.
//
// Waiting Acquires queue in the waiters table (the lock table's name +
// "_waiters"): an attempt of a waiting Acquire takes a free key only if no
// live waiter came before it, and otherwise joins (or stays in) the queue,
// its place lasting queueWindow past the holder's expiry; a grant leaves the
// queue; a release cuts every place down to one window, and a waiter told
// another comes first looks again within half a window. TryAcquire takes a
// free key whoever waits. A waiting Acquire's
// first attempt only reads the queue (it takes a free key nobody waits
// for); it joins the queue once it found the key held.
//
// Release notices go to the channel "distlock:<schema>.<table>" (an md5 of
// that if it is long), named once per backend through its pool, as the
// pool's statements resolve the table: Lockers that name one table
// differently hear each other, and a table dropped and created again keeps
// its channel.
type statements struct {
	table        string // quoted, for SQL text
	ddl          string
	acquire      string // $5 the waiter, "" for TryAcquire
	acquireQueue string // $5 the waiter: the attempt joins or keeps its place
	dequeue      string
	refresh      string
	refreshBatch string
	release      string
	giveBack     string
	inspect      string
	channel      string
	holdShare    string
	commitHeld   string
}

func newStatements(name string) (*statements, error) {
	if !tableName.MatchString(name) {
		return nil, fmt.Errorf("%w: postgres: table name %q: want a lower-case identifier, optionally schema.table", distlock.ErrInvalidOption, name)
	}
	parts := strings.Split(name, ".")
	t := pgx.Identifier(parts).Sanitize()
	parts[len(parts)-1] += "_waiters"
	w := pgx.Identifier(parts).Sanitize()
	window := fmt.Sprintf("interval '%d microseconds'", queueWindow.Microseconds())
	now := `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	next := mutation.Pick("pg-token-counter", "l.token + 1", "greatest(l.token + 1, excluded.token)") // mutation: pg-token-counter
	// take grants $1 to $2 for $3 µs with value $4 if the key is free, the
	// owner not refused and turn holds; it returns the token. turn filters
	// the row to insert, not the update: ON CONFLICT locks the key's row
	// even when its WHERE fails, so waiters that are not first would
	// queue on that row lock, one commit after another, at every release.
	take := func(turn string) string {
		return `
	INSERT INTO ` + t + ` AS l (key, owner, token, value, expires_at)
	SELECT $1::text, $2::text, ` + now + `, $4::bytea, clock_timestamp() + $3 * interval '1 microsecond'
	WHERE ` + turn + `
	ON CONFLICT (key) DO UPDATE
		SET owner = excluded.owner, token = ` + next + `,
			value = excluded.value, expires_at = excluded.expires_at
		WHERE (l.owner IS NULL OR l.expires_at <= clock_timestamp())
			AND NOT excluded.owner = ANY (coalesce(l.refused, '{}'))
	RETURNING l.token
`
	}
	channel := `(SELECT 'distlock:' || CASE WHEN length(q) <= 54 THEN q ELSE md5(q) END FROM (
		SELECT n.nspname || '.' || c.relname AS q FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = '` + strings.ReplaceAll(t, "'", "''") + `'::regclass) r)`
	// notify(p) notices a release on channel parameter p (none if it is
	// "": the channel is not named yet).
	notify := func(p string) string { return `(SELECT pg_notify(` + p + `, key) WHERE ` + p + ` <> '')` }
	// shortenPlaces caps every place in $1's queue at one window from now:
	// the key is free, and a waiter that does not come in time (dead, or
	// gone without leaving) holds the others up no longer.
	shortenPlaces := `UPDATE ` + w + ` SET until = clock_timestamp() + ` + window + `
	WHERE key = $1 AND until > clock_timestamp() + ` + window
	return &statements{
		table: t,
		ddl: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        text PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL,
	value      bytea,
	expires_at timestamptz,
	refused    text[]
);
CREATE TABLE IF NOT EXISTS ` + w + ` (
	key    text NOT NULL,
	waiter text NOT NULL,
	seq    bigint GENERATED ALWAYS AS IDENTITY,
	until  timestamptz NOT NULL,
	PRIMARY KEY (key, waiter)
)`,
		// $1 key, $2 owner, $3 TTL in µs, $4 value. One row back: the token
		// granted (and 0), or 0 and the holder's remaining µs.
		acquire: `WITH taken AS (` + take(`$5 = '' OR NOT EXISTS (SELECT 1 FROM `+w+` q WHERE q.key = $1 AND q.until > clock_timestamp())`) + `)
SELECT token, 0::bigint FROM taken
UNION ALL
SELECT 0, greatest(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000, 0)::bigint
FROM ` + t + ` l WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM taken)`,
		acquireQueue: `WITH ahead AS (
	SELECT 1 FROM ` + w + ` q WHERE $5 <> '' AND q.key = $1 AND q.waiter <> $5 AND q.until > clock_timestamp()
		AND q.seq < coalesce((SELECT seq FROM ` + w + ` WHERE key = $1 AND waiter = $5), 9223372036854775807)
	LIMIT 1
), taken AS (` + take(`NOT EXISTS (SELECT 1 FROM ahead)`) + `), queued AS (
	INSERT INTO ` + w + ` (key, waiter, until)
	SELECT $1, $5, greatest((SELECT expires_at FROM ` + t + ` WHERE key = $1), clock_timestamp()) + ` + window + `
	WHERE $5 <> '' AND NOT EXISTS (SELECT 1 FROM taken)
		AND NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE key = $1 AND owner = $2)
	ON CONFLICT (key, waiter) DO UPDATE SET until = excluded.until
	RETURNING 1
), left_queue AS (
	DELETE FROM ` + w + ` WHERE key = $1 AND EXISTS (SELECT 1 FROM taken)
		AND (waiter = $5 OR until < clock_timestamp() - interval '1 minute')
	RETURNING 1
)
SELECT token, 0::bigint FROM taken
UNION ALL
SELECT 0, greatest(extract(epoch FROM coalesce(
		CASE WHEN l.owner IS NOT NULL AND l.expires_at > clock_timestamp() THEN l.expires_at END,
		least((SELECT min(until) FROM ` + w + ` WHERE key = $1 AND until > clock_timestamp() AND waiter <> $5),
			clock_timestamp() + ` + window + ` / 2),
		clock_timestamp()) - clock_timestamp()) * 1000000, 0)::bigint
FROM ` + t + ` l WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM taken)`,
		// $1 key, $2 waiter, $3 channel: leaves the queue, and wakes the others if the
		// key is free (the first of them may now take it).
		dequeue: `WITH gone AS (DELETE FROM ` + w + ` WHERE key = $1 AND waiter = $2 RETURNING key)
SELECT ` + notify("$3") + ` FROM gone WHERE EXISTS (
	SELECT 1 FROM ` + t + ` WHERE key = $1 AND (owner IS NULL OR expires_at <= clock_timestamp()))`,
		// $1 key, $2 owner, $3 token, $4 TTL in µs.
		refresh: `UPDATE ` + t + ` SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`,
		// $1 keys, $2 owners, $3 tokens, $4 TTLs in µs: the grants refreshed.
		refreshBatch: `UPDATE ` + t + ` l SET expires_at = clock_timestamp() + r.ttl * interval '1 microsecond'
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS r(key, owner, token, ttl)
WHERE l.key = r.key AND l.owner = r.owner AND l.token = r.token AND l.expires_at > clock_timestamp()
RETURNING l.key, l.owner, l.token`,
		// $1 key, $2 owner, $3 token, $4 channel: one row if released.
		release: `WITH freed AS (
	UPDATE ` + t + ` SET owner = NULL, value = NULL, expires_at = NULL
	WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING key
), shortened AS (` + shortenPlaces + ` AND EXISTS (SELECT 1 FROM freed) RETURNING 1)
SELECT ` + notify("$4") + ` FROM freed`,
		// $1 key, $2 owner, $3 channel: frees what the attempt of $2 may have taken and
		// refuses a late copy of it.
		giveBack: `WITH gone AS (
	INSERT INTO ` + t + ` AS l (key, token, refused) VALUES ($1, 0, ARRAY[$2::text])
	ON CONFLICT (key) DO UPDATE SET
		refused = (array_append(coalesce(l.refused, '{}'), $2::text))[greatest(1, cardinality(l.refused) + 2 - ` + fmt.Sprint(maxRefused) + `):],
		owner = CASE WHEN l.owner = $2 THEN NULL ELSE l.owner END,
		value = CASE WHEN l.owner = $2 THEN NULL ELSE l.value END,
		expires_at = CASE WHEN l.owner = $2 THEN NULL ELSE l.expires_at END
	RETURNING l.key, l.owner IS NULL AS free
), shortened AS (` + shortenPlaces + ` AND EXISTS (SELECT 1 FROM gone WHERE free) RETURNING 1)
SELECT ` + notify("$3") + ` FROM gone WHERE free`,
		// $1 key: held, token, value, remaining µs, live waiters.
		inspect: `SELECT owner IS NOT NULL AND expires_at > clock_timestamp(), token, value,
	greatest(extract(epoch FROM expires_at - clock_timestamp()) * 1000000, 0)::bigint,
	(SELECT count(*) FROM ` + w + ` WHERE key = $1 AND until > clock_timestamp())
FROM ` + t + ` WHERE key = $1`,
		channel: `SELECT ` + channel,
		// $1 key, $2 owner, $3 token: the lease's row, locked against a new
		// grant until the transaction ends; true while the lease holds. It
		// leaves the lease in the transaction's settings for commitHeld.
		holdShare: `SELECT expires_at > clock_timestamp(), set_config('distlock.lease_key', key, true),
	set_config('distlock.lease_owner', owner, true), set_config('distlock.lease_token', token::text, true)
FROM ` + t + ` WHERE key = $1 AND owner = $2 AND token = $3 FOR SHARE`,
		// One string, run by the server without waiting for the client:
		// a pause of the client cannot come between the check and COMMIT.
		commitHeld: `DO $$BEGIN
	IF NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE key = current_setting('distlock.lease_key')
		AND owner = current_setting('distlock.lease_owner')
		AND token = current_setting('distlock.lease_token')::bigint AND expires_at > clock_timestamp()) THEN
		RAISE EXCEPTION USING ERRCODE = '` + leaseExpiredCode + `', MESSAGE = 'distlock: the lease expired before commit';
	END IF;
END$$; COMMIT`,
	}, nil
}
