package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// Inspecting: see "Inspect and Watch" in docs/backends/zookeeper.md. A key's
// holder is the lowest lock znode of its directory; one Children lists the
// directory, one GetData reads the holder's value and stat (its czxid is
// the token). A znode listed but gone by the time it is read is skipped:
// the next one in the listing is read instead, which then holds the lock
// (it exists, every znode before it is gone, and a znode created later
// gets a larger sequence), so a hand-off costs one more read, not a new
// listing.

// inspectRounds bounds the listings of one Inspect whose queue keeps
// emptying under it; inspectReads bounds the reads after one listing.
const (
	inspectRounds = 3
	inspectReads  = 8
)

// queued is a lock znode of a listing.
type queued struct {
	name string
	seq  int64
}

// queue returns the lock znodes among children, lowest sequence first; it
// ignores names not of the lock form, as the lock does.
func queue(children []string) []queued {
	q := make([]queued, 0, len(children))
	for _, c := range children {
		if _, seq, ok := parseName(c); ok {
			q = append(q, queued{c, seq})
		}
	}
	slices.SortFunc(q, func(a, b queued) int { return cmp.Compare(a.seq, b.seq) })
	return q
}

// lowest returns the name of the lowest lock znode among children, or "".
func lowest(children []string) string {
	name, low := "", int64(0)
	for _, c := range children {
		if _, seq, ok := parseName(c); ok && (name == "" || seq < low) {
			name, low = c, seq
		}
	}
	return name
}

// Inspect implements driver.Backend.Inspect: the key's holder as the server the
// session is connected to sees it, in two round trips (three or more only
// when holders leave while it reads).
func (b *backend) Inspect(ctx context.Context, key string) (driver.Holder, error) {
	conn := b.conn.Load()
	dir := b.base + "/" + escapeKey(key)
	// One goroutine for the whole read (go-zookeeper's calls block), not
	// one per request.
	h, err := call(b, ctx, func() (driver.Holder, error) { return b.inspect(ctx, conn, dir) })
	if err != nil && ctx.Err() == nil {
		return driver.Holder{}, b.classify(err)
	}
	return h, err
}

func (b *backend) inspect(ctx context.Context, conn *zk.Conn, dir string) (driver.Holder, error) {
	for range inspectRounds {
		children, _, err := conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Holder{}, nil // reaped while empty, or never used
		}
		if err != nil {
			return driver.Holder{}, fmt.Errorf("zookeeper: list %s: %w", dir, err)
		}
		q := queue(children)
		if len(q) == 0 {
			return driver.Holder{}, nil
		}
		if b.afterList != nil {
			b.afterList()
		}
		for i, e := range q[:min(len(q), inspectReads)] {
			if err := ctx.Err(); err != nil {
				return driver.Holder{}, err
			}
			data, st, err := conn.Get(dir + "/" + e.name)
			if errors.Is(err, zk.ErrNoNode) {
				continue // released meanwhile: the next one holds, if it exists
			}
			if err != nil {
				return driver.Holder{}, fmt.Errorf("zookeeper: read %s/%s: %w", dir, e.name, err)
			}
			return driver.Holder{Held: true, Token: st.Czxid, Value: string(data), Waiters: len(q) - i - 1}, nil
		}
		// Every znode read was gone: list again.
		if err := ctx.Err(); err != nil {
			return driver.Holder{}, err
		}
	}
	return driver.Holder{}, fmt.Errorf("zookeeper: the queue of %s emptied under each of %d reads", dir, inspectRounds)
}
