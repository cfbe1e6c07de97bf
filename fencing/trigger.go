package fencing

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A role that may UPDATE the fence table — every runtime role, since Guard
// needs it — could otherwise set a row back by hand and let a stale holder
// through. Two triggers, which Migrate installs, refuse that to everyone;
// only the table's owner can lower a fence, by disabling them.
const (
	// rowTrigger refuses an UPDATE that lowers a fence, and every DELETE.
	// It runs AFTER the row is written, so it checks the row as stored,
	// after every BEFORE trigger (a foreign one that sorts after it could
	// rewrite NEW); a raise there still aborts the statement.
	rowTrigger = "distlock_fence_no_lowering"
	// truncateTrigger refuses TRUNCATE, which deletes every fence.
	truncateTrigger = "distlock_fence_no_truncate"
	// triggerFunc runs both, for DefaultTable; other tables get one of
	// their own (funcName), owned by their owner.
	triggerFunc = "distlock_fence_no_lowering"
)

// triggerBody is triggerFunc's PL/pgSQL. An UPDATE passes only if it keeps
// the resource and raises (epoch, token), or keeps the pair and the holder:
// exactly what Guard's upsert writes. Keeping the pair with another holder
// would let a second holder of a token handed out twice pass. NULL epochs
// and tokens count as 0, as the guard counts them. The owner of the
// function can change what it does, so Migrate counts the triggers as
// installed only while the table's owner owns it and its text is this one.
// Its search_path is pinned (triggerConfig): it runs as the caller, who
// could otherwise put a schema of its own before pg_catalog, with an
// operator (a <> on text, say) that lets a moved fence pass.
const triggerBody = `
DECLARE
    hint CONSTANT text := 'Only the table''s owner can lower a fence: ALTER TABLE ... DISABLE TRIGGER '
        || TG_NAME || ', lower it and ENABLE ALWAYS TRIGGER again, in one transaction.';
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', HINT = hint, SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
            MESSAGE = format('distlock fencing: truncating %I.%I would delete every fence in it', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    ELSIF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', HINT = hint, SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
            MESSAGE = format('distlock fencing: deleting the fence of %L from %I.%I would lower it to nothing',
                OLD.resource, TG_TABLE_SCHEMA, TG_TABLE_NAME);
    ELSIF NEW.resource <> OLD.resource THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', HINT = hint, SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
            MESSAGE = format('distlock fencing: moving the fence of %L in %I.%I to %L would lower it to nothing',
                OLD.resource, TG_TABLE_SCHEMA, TG_TABLE_NAME, NEW.resource);
    ELSIF (coalesce(NEW.epoch, 0), coalesce(NEW.token, 0)) > (coalesce(OLD.epoch, 0), coalesce(OLD.token, 0))
        OR ((coalesce(NEW.epoch, 0), coalesce(NEW.token, 0)) = (coalesce(OLD.epoch, 0), coalesce(OLD.token, 0))
            AND NEW.holder IS NOT DISTINCT FROM OLD.holder) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'check_violation', HINT = hint, SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
        MESSAGE = format('distlock fencing: the fence of %L in %I.%I may not go down from (epoch %s, token %s, holder %L) to (epoch %s, token %s, holder %L)',
            OLD.resource, TG_TABLE_SCHEMA, TG_TABLE_NAME, OLD.epoch, OLD.token, OLD.holder, NEW.epoch, NEW.token, NEW.holder);
END
`

// triggerConfig is triggerFunc's pinned search_path, as pg_proc.proconfig
// stores it.
const triggerConfig = "search_path=pg_catalog, pg_temp"

// lookSQL finds the table ($1) as the guard does (search_path) and says in
// which schema, whether it has the holder and epoch columns, and whether
// both triggers are there, enabled ALWAYS, unconditional, on the right events and
// running this version's function ($2), with its search_path pinned,
// owned by the table's owner; and the first trigger on it, if any, that is
// neither of them nor internal (a foreign key's). No row: no such table.
// It reads only the catalog, which every role may.
//
// It runs under the caller's search_path, where a role with CREATE on a
// schema of the path can add an operator that matches the operands more
// exactly than pg_catalog's and so wins (CVE-2018-1058): every operator is
// pg_catalog's, named with OPERATOR(), on operands of exactly its types.
const lookSQL = `SELECT n.nspname,
    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_attribute a
      WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND NOT a.attisdropped
        AND a.attname OPERATOR(pg_catalog.=) ANY (ARRAY['holder', 'epoch']::pg_catalog.name[])) OPERATOR(pg_catalog.=) 2::pg_catalog.int8,
    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger g JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) g.tgfoid
      WHERE g.tgrelid OPERATOR(pg_catalog.=) c.oid AND g.tgenabled OPERATOR(pg_catalog.=) 'A'::pg_catalog."char"
        AND g.tgqual IS NULL
        AND ((g.tgname OPERATOR(pg_catalog.=) '` + rowTrigger + `'::pg_catalog.name AND g.tgtype OPERATOR(pg_catalog.=) ` + rowTriggerType + `::pg_catalog.int2)
          OR (g.tgname OPERATOR(pg_catalog.=) '` + truncateTrigger + `'::pg_catalog.name AND g.tgtype OPERATOR(pg_catalog.=) ` + truncateTriggerType + `::pg_catalog.int2))
        AND p.proowner OPERATOR(pg_catalog.=) c.relowner AND p.prosrc OPERATOR(pg_catalog.=) $2::pg_catalog.text
        AND p.proconfig OPERATOR(pg_catalog.=) ARRAY['` + triggerConfig + `']::pg_catalog.text[]) OPERATOR(pg_catalog.=) 2::pg_catalog.int8,
    (SELECT pg_catalog.min(g.tgname::pg_catalog.text) FROM pg_catalog.pg_trigger g
      WHERE g.tgrelid OPERATOR(pg_catalog.=) c.oid AND NOT g.tgisinternal
        AND g.tgname OPERATOR(pg_catalog.<>) ALL (ARRAY['` + rowTrigger + `', '` + truncateTrigger + `']::pg_catalog.name[]))
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1::pg_catalog.text)::pg_catalog.oid`

// pg_trigger.tgtype of the two triggers: ROW (1) | DELETE (8) | UPDATE
// (16), AFTER (no bit), and BEFORE (2) | TRUNCATE (32), statement level.
const (
	rowTriggerType      = "25"
	truncateTriggerType = "34"
)

// lockTimeout bounds the upgrade's wait for the table: its ALTER TABLE
// queues for ACCESS EXCLUSIVE behind open guard transactions, and every
// guard queues behind it, so a long wait would stall them all. Migrate
// fails instead, and the next start-up tries again.
const lockTimeout = "5s"

// funcName is the name of the table's trigger function. Each table has its
// own, so two tables of one schema with different owners each own theirs
// (a shared one could only be replaced by its owner, and a function owned
// by another role than the table's could change what the trigger does).
func funcName(table string) string {
	if table == DefaultTable {
		return triggerFunc
	}
	h := fnv.New64a()
	h.Write([]byte(table))
	return fmt.Sprintf("%s_%016x", triggerFunc, h.Sum64())
}

// upgradeScript brings the table up to date: the holder and epoch columns,
// then its trigger function (in the schema named by fnSchema, or the first
// schema of the search_path if fnSchema is empty) and both triggers. It is
// one simple-protocol query, so PostgreSQL runs it as one transaction; only
// the table's owner, a member of its role or a superuser may run it. It
// first switches to the table's owner (SET LOCAL ROLE), so that the
// function is the owner's, as lookSQL requires, whoever runs it.
func (t *Table) upgradeScript(fnSchema []string) string {
	fn := pgx.Identifier(append(append([]string(nil), fnSchema...), funcName(t.parts[len(t.parts)-1]))).Sanitize()
	// No advisory lock: any role may hold one, and the table lock alone
	// serialises the upgrades of a table and of its own function.
	return "SELECT pg_catalog.set_config('lock_timeout', '" + lockTimeout + "', true);\n" +
		"SELECT pg_catalog.set_config('role', (SELECT pg_catalog.pg_get_userbyid(c.relowner)::pg_catalog.text FROM pg_catalog.pg_class c " +
		"WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(" + sqlString(t.name) + "::pg_catalog.text)::pg_catalog.oid), true);\n" +
		t.columnsSQL + ";\n" +
		"CREATE OR REPLACE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $distlock$" + triggerBody + "$distlock$;\n" +
		"DROP TRIGGER IF EXISTS " + rowTrigger + " ON " + t.name + ";\n" +
		"CREATE TRIGGER " + rowTrigger + " AFTER UPDATE OR DELETE ON " + t.name + " FOR EACH ROW EXECUTE FUNCTION " + fn + "();\n" +
		"DROP TRIGGER IF EXISTS " + truncateTrigger + " ON " + t.name + ";\n" +
		"CREATE TRIGGER " + truncateTrigger + " BEFORE TRUNCATE ON " + t.name + " FOR EACH STATEMENT EXECUTE FUNCTION " + fn + "();\n" +
		// ALWAYS: an origin trigger does not fire in a session with
		// session_replication_role = replica, which a role may be
		// granted to set without owning the table.
		"ALTER TABLE " + t.name + " ENABLE ALWAYS TRIGGER " + rowTrigger + ", ENABLE ALWAYS TRIGGER " + truncateTrigger
}

// sqlString quotes s as an escape string literal, which reads the same
// whatever standard_conforming_strings says.
func sqlString(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}
