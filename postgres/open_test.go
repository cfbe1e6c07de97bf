package postgres_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/postgres"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	dsn, _ := server(t)
	ctx := t.Context()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("ttl", "5s")
	u.RawQuery = q.Encode()
	l, err := distlock.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if g := l.Guarantees(); g.Backend != "postgres" || g.Wait != distlock.WaitNotify || g.ClockDependent || g.FailuresTolerated != 0 {
		t.Fatalf("Guarantees = %+v", g)
	}
	ls, err := l.TryAcquire(ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	if ls.TTL() != 5*time.Second {
		t.Fatalf("TTL %v, want the URL's 5s", ls.TTL())
	}
	var row postgres.LeaseRow
	if !ls.As(&row) || row.Key != "open" || row.Token != ls.Token() {
		t.Fatalf("Lease.As(*LeaseRow) = %+v", row)
	}
	var pool *pgxpool.Pool
	if !distlock.As(l, &pool) || pool == nil {
		t.Fatal("As does not reach the pool")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	for _, tc := range []struct {
		url  string
		want error
	}{
		{"postgres://", distlock.ErrInvalidURL},
		{"postgresql:///db", distlock.ErrInvalidURL},
		{"postgres://u:secret@" + closed + "/db?table=Bad-Name", distlock.ErrInvalidOption},
		{"postgres://u:secret@" + closed + "/db?notify=maybe", distlock.ErrInvalidURL},
		{"postgres://u:secret@" + closed + "/db?sslmode=nonsense", distlock.ErrInvalidURL},
		{"postgres://u:secret@" + closed + "/db?connect_timeout=2", distlock.ErrUnavailable},
	} {
		l, err := distlock.Open(ctx, tc.url)
		if err == nil {
			_ = l.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("Open(%q) = %v, want %v", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", tc.url, err)
		}
	}
}

// On a server that takes only TLS and SCRAM: the least-privilege role
// locks once granted SELECT, INSERT, UPDATE on the table, and is
// ErrAccessDenied before; a wrong password is ErrAccessDenied at Open.
func TestSecured(t *testing.T) {
	t.Parallel()
	p := testserver.PostgresSecured(t)
	ctx := t.Context()
	migrator := newPool(t, p.Migrator.DSN)
	if err := postgres.Migrate(ctx, migrator); err != nil {
		t.Fatal(err)
	}
	app := newPool(t, p.Runtime.DSN)
	l := newLocker(t, app)
	if _, err := l.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrAccessDenied) {
		t.Fatalf("no grants yet: got %v, want ErrAccessDenied", err)
	}
	p.GrantRuntime(t, postgres.DefaultTable, postgres.DefaultTable+"_waiters")
	if _, err := migrator.Exec(ctx, `GRANT DELETE ON distlock_locks_waiters TO app`); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("with SELECT, INSERT, UPDATE: %v", err)
	}
	if err := ls.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	wrong := strings.Replace(p.Runtime.DSN, "postgres://app:", "postgres://app:wrong", 1)
	if _, err := distlock.Open(ctx, wrong); !errors.Is(err, distlock.ErrAccessDenied) {
		t.Fatalf("wrong password: got %v, want ErrAccessDenied", err)
	} else if strings.Contains(err.Error(), p.Runtime.Password) {
		t.Fatalf("the error shows the password: %v", err)
	}
	var cancel context.CancelFunc
	ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := distlock.Open(ctx, p.Runtime.DSN)
	if err != nil {
		t.Fatalf("Open over TLS with SCRAM: %v", err)
	}
	defer l2.Close()
	if _, err := l2.TryAcquire(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
}
