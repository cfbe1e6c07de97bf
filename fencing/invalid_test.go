package fencing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fencing"
)

func testInvalid(t *testing.T, pool *pgxpool.Pool) {
	// Bounded: a call that wrongly reaches the database may wait on the
	// fence row that tx below holds; it must fail, not hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fn := func(pgx.Tx) error { return nil }
	row := fencing.RowUpdate{Table: pgx.Identifier{"data"}, Fence: "n", Holder: "value",
		Key: []fencing.Column{{Name: "resource", Value: "x"}}}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	with := func(f func(*fencing.RowUpdate)) fencing.RowUpdate {
		u := row
		f(&u)
		return u
	}
	cases := map[string]func() error{
		"WithGuard nil ctx":        func() error { return fencing.WithGuard(nil, pool, "r", fence(1), fn) }, //nolint:staticcheck // the point of the test
		"WithGuard nil db":         func() error { return fencing.WithGuard(ctx, nil, "r", fence(1), fn) },
		"WithGuard typed nil pool": func() error { return fencing.WithGuard(ctx, (*pgxpool.Pool)(nil), "r", fence(1), fn) },
		"WithGuard typed nil conn": func() error { return fencing.WithGuard(ctx, (*pgx.Conn)(nil), "r", fence(1), fn) },
		"WithGuard empty resource": func() error { return fencing.WithGuard(ctx, pool, "", fence(1), fn) },
		"WithGuard control char":   func() error { return fencing.WithGuard(ctx, pool, "a\x00b", fence(1), fn) },
		"WithGuard long resource":  func() error { return fencing.WithGuard(ctx, pool, strings.Repeat("r", 600), fence(1), fn) },
		"WithGuard zero token":     func() error { return fencing.WithGuard(ctx, pool, "r", fence(0), fn) },
		"WithGuard negative token": func() error { return fencing.WithGuard(ctx, pool, "r", fence(-1), fn) },
		"WithGuard nil fn":         func() error { return fencing.WithGuard(ctx, pool, "r", fence(1), nil) },
		"Guard nil tx":             func() error { return fencing.Guard(ctx, nil, "r", fence(1)) },
		"Guard empty resource":     func() error { return fencing.Guard(ctx, tx, "", fence(1)) },
		"WithGuard empty holder":   func() error { return fencing.WithGuard(ctx, pool, "r", distlock.Fence{Token: 1}, fn) },
		"Guard empty holder":       func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1}) },
		"Guard NUL in holder":      func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: "a\x00b"}) },
		"Guard holder not UTF-8":   func() error { return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: "\xff"}) },
		"Guard long holder": func() error {
			return fencing.Guard(ctx, tx, "r", distlock.Fence{Token: 1, Holder: strings.Repeat("h", 256)})
		},
		"UpdateRow empty holder": func() error { return fencing.UpdateRow(ctx, pool, row, distlock.Fence{Token: 1}) },
		"UpdateRow no holder column": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Holder = "" }), fence(1))
		},
		"UpdateRow holder is fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Holder = u.Fence }), fence(1))
		},
		"UpdateRow sets holder": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "value"}} }), fence(1))
		},
		"Migrate nil db":       func() error { return fencing.Migrate(ctx, nil) },
		"UpdateRow nil db":     func() error { return fencing.UpdateRow(ctx, nil, row, fence(1)) },
		"UpdateRow zero token": func() error { return fencing.UpdateRow(ctx, pool, row, fence(0)) },
		"UpdateRow no table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = nil }), fence(1))
		},
		"UpdateRow empty table": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Table = pgx.Identifier{""} }), fence(1))
		},
		"UpdateRow no fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = "" }), fence(1))
		},
		"UpdateRow no key": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = nil }), fence(1))
		},
		"UpdateRow empty key name": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Key = []fencing.Column{{}} }), fence(1))
		},
		"UpdateRow sets fence": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "n"}} }), fence(1))
		},
		"UpdateRow sets twice": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Set = []fencing.Column{{Name: "v"}, {Name: "v"}} }), fence(1))
		},
		"UpdateRow long identifier": func() error {
			return fencing.UpdateRow(ctx, pool, with(func(u *fencing.RowUpdate) { u.Fence = strings.Repeat("f", 64) }), fence(1))
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, distlock.ErrInvalid) {
				t.Fatalf("want fencing.ErrInvalid (and distlock.ErrInvalid), got %v", err)
			}
		})
	}
	for _, name := range [][]string{nil, {""}, {"a", "b", "c", "d"}, {"x\x00"}} {
		if _, err := fencing.NewTable(name...); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("NewTable(%q): want ErrInvalid, got %v", name, err)
		}
	}
}

func testCancelled(t *testing.T, pool *pgxpool.Pool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := write(ctx, pool, "cancelled", fence(1), "never")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if got := value(t, pool, "cancelled"); got != "<none>" {
		t.Fatalf("data = %q after a cancelled write", got)
	}
	// A ctx that ends while the guard waits for the fence row lock.
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := fencing.Guard(context.Background(), tx, "cancelled", fence(5)); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer wcancel()
	if err := write(wctx, pool, "cancelled", fence(6), "blocked"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("guard waiting on a held fence row: want DeadlineExceeded, got %v", err)
	}
}
