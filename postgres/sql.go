package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mutation"
)

// DefaultTable is the lock table used when WithTable is not given.
const DefaultTable = "distlock_locks"

// tableName is a table name: an unquoted identifier, optionally
// schema-qualified, lower case so that it reads the same quoted or not.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)

// statements are the SQL of one lock table. Every lock is a row; a free
// lock keeps its row (owner NULL) so that its token keeps rising.
//
// Tokens are max(the key's last token + 1, the database clock in
// microseconds): they rise per key across restarts, and across a failover
// to a replica that missed the latest grants as long as the new primary's
// clock is past the lost grants' time.
//
// refused is the owner of the last attempt given back without an answer:
// a copy of that attempt landing late takes nothing.
type statements struct {
	table, channel string
	ddl            string
	acquire        string
	refresh        string
	refreshBatch   string
	release        string
	giveBack       string
	inspect        string
	holdShare      string
	stillHeld      string
}

func newStatements(name string) (*statements, error) {
	if !tableName.MatchString(name) {
		return nil, fmt.Errorf("%w: postgres: table name %q: want a lower-case identifier, optionally schema.table", distlock.ErrInvalidOption, name)
	}
	t := pgx.Identifier(strings.Split(name, ".")).Sanitize()
	now := `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	next := mutation.Pick("pg-token-counter", "l.token + 1", "greatest(l.token + 1, excluded.token)") // mutation: pg-token-counter
	return &statements{
		table:   t,
		channel: channelOf(name),
		ddl: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	key        text PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL,
	value      bytea,
	expires_at timestamptz,
	refused    text
)`,
		// $1 key, $2 owner, $3 TTL in µs, $4 value. One row back: the token
		// granted (and 0), or 0 and the holder's remaining µs.
		acquire: `WITH taken AS (
	INSERT INTO ` + t + ` AS l (key, owner, token, value, expires_at)
	VALUES ($1, $2, ` + now + `, $4, clock_timestamp() + $3 * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE
		SET owner = excluded.owner, token = ` + next + `,
			value = excluded.value, expires_at = excluded.expires_at
		WHERE (l.owner IS NULL OR l.expires_at <= clock_timestamp()) AND l.refused IS DISTINCT FROM excluded.owner
	RETURNING l.token
)
SELECT token, 0::bigint FROM taken
UNION ALL
SELECT 0, greatest(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000, 0)::bigint
FROM ` + t + ` l WHERE l.key = $1 AND NOT EXISTS (SELECT 1 FROM taken)`,
		// $1 key, $2 owner, $3 token, $4 TTL in µs.
		refresh: `UPDATE ` + t + ` SET expires_at = clock_timestamp() + $4 * interval '1 microsecond'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`,
		// $1 keys, $2 owners, $3 tokens, $4 TTLs in µs: the indexes refreshed.
		refreshBatch: `UPDATE ` + t + ` l SET expires_at = clock_timestamp() + r.ttl * interval '1 microsecond'
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS r(key, owner, token, ttl, i)
WHERE l.key = r.key AND l.owner = r.owner AND l.token = r.token AND l.expires_at > clock_timestamp()
RETURNING r.i`,
		// $1 key, $2 owner, $3 token, $4 channel: one row if released.
		release: `WITH freed AS (
	UPDATE ` + t + ` SET owner = NULL, value = NULL, expires_at = NULL
	WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
	RETURNING key
)
SELECT pg_notify($4, key) FROM freed`,
		// $1 key, $2 owner, $3 channel: frees what the attempt of $2 may
		// have taken and refuses a late copy of it.
		giveBack: `WITH gone AS (
	INSERT INTO ` + t + ` AS l (key, token, refused) VALUES ($1, 0, $2)
	ON CONFLICT (key) DO UPDATE SET
		refused = excluded.refused,
		owner = CASE WHEN l.owner = excluded.refused THEN NULL ELSE l.owner END,
		value = CASE WHEN l.owner = excluded.refused THEN NULL ELSE l.value END,
		expires_at = CASE WHEN l.owner = excluded.refused THEN NULL ELSE l.expires_at END
	RETURNING l.key, l.owner IS NULL AS free
)
SELECT pg_notify($3, key) FROM gone WHERE free`,
		// $1 key: held, token, value, remaining µs.
		inspect: `SELECT owner IS NOT NULL AND expires_at > clock_timestamp(), token, value,
	greatest(extract(epoch FROM expires_at - clock_timestamp()) * 1000000, 0)::bigint
FROM ` + t + ` WHERE key = $1`,
		// $1 key, $2 owner, $3 token: the lease's row, locked against a new
		// grant until the transaction ends; true while the lease holds.
		holdShare: `SELECT expires_at > clock_timestamp() FROM ` + t + `
WHERE key = $1 AND owner = $2 AND token = $3 FOR SHARE`,
		stillHeld: `SELECT expires_at > clock_timestamp() FROM ` + t + `
WHERE key = $1 AND owner = $2 AND token = $3`,
	}, nil
}

// channelOf names the NOTIFY channel of table name's releases, within
// PostgreSQL's 63 bytes.
func channelOf(name string) string {
	if c := "distlock:" + name; len(c) <= 63 {
		return c
	}
	sum := sha256.Sum256([]byte(name))
	return "distlock:" + hex.EncodeToString(sum[:16])
}
