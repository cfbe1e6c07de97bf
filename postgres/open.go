package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
	"github.com/distlock/distlock/internal/pgerr"
)

// openTimeout bounds Open's first round trip when the URL sets no
// connect_timeout.
const openTimeout = 5 * time.Second

// open is the Opener of postgres:// and postgresql:// URLs. Parameters:
//
//	table=app.locks   WithTable
//	notify=false      WithNotify(false) (behind PgBouncer in transaction mode)
//
// and every parameter of pgx's connection strings (sslmode, sslrootcert,
// sslcert, sslkey, connect_timeout, pool_max_conns, …) and the server
// settings application_name, search_path, statement_timeout, lock_timeout,
// idle_in_transaction_session_timeout, client_encoding and timezone (any
// other as options=-c name=value); anything else is an error, before
// connecting. The server must answer within connect_timeout (default 5s, never
// past ctx): otherwise Open fails with an error matching ErrUnavailable, or
// ErrAccessDenied when it refused the role or the client refused its
// certificate. The pool is the Locker's: Close closes it.
func open(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %s://… has no host (want %s://user@host:5432/db)", distlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	q := urlparam.NewQuery(u)
	var bopts []driver.Option
	if t, ok := q.String("table"); ok {
		bopts = append(bopts, WithTable(t).DriverOption())
	}
	if n, ok := q.Bool("notify"); ok {
		bopts = append(bopts, WithNotify(n).DriverOption())
	}
	theirs := q.Pass(pgxParams...)
	if err := q.Done(); err != nil {
		return nil, err
	}
	opts = append(append(bopts, opts...), WithClosePool(true).DriverOption())
	o, err := driver.ResolveBackend("postgres", opts)
	if err != nil {
		return nil, err // before connecting
	}
	rest := *u
	rest.RawQuery = theirs.Encode()
	cfg, err := pgxpool.ParseConfig(rest.String())
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // pgx's message repeats the URL
		}
		return nil, fmt.Errorf("%w: %s: %v", distlock.ErrInvalidURL, urlparam.Redact(u.String()), err)
	}
	if o.TLS != nil {
		tc := o.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = cfg.ConnConfig.Host
		}
		cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = tc, nil
	}
	return connect(ctx, cfg, opts)
}

// pgxParams are the query parameters handed to pgx: its connection
// settings (pgconn's, pgx's and pgxpool's) and the server settings most
// often given at connect. pgx would send any other name to the server as a
// setting, so a typo would fail only at connect; other server settings go
// in options=-c name=value, as with libpq.
var pgxParams = []string{
	// pgconn
	"host", "port", "database", "user", "password", "passfile", "connect_timeout",
	"sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation",
	"sslpassword", "sslsni", "krbspn", "krbsrvname", "target_session_attrs", "service",
	"servicefile", "min_protocol_version", "max_protocol_version", "channel_binding",
	"require_auth",
	// pgx
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	// pgxpool
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_idle_time", "pool_health_check_period", "pool_max_conn_lifetime_jitter",
	"pool_ping_timeout",
	// server settings
	"options", "application_name", "search_path", "statement_timeout", "lock_timeout",
	"idle_in_transaction_session_timeout", "client_encoding", "timezone",
}

// connect makes the pool and checks that the server answers.
func connect(ctx context.Context, cfg *pgxpool.Config, opts []driver.Option) (driver.Backend, error) {
	timeout := cfg.ConnConfig.ConnectTimeout
	if timeout <= 0 {
		timeout = openTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %v", distlock.ErrInvalidURL, err)
	}
	b, err := newBackend(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := pool.Ping(pctx); err != nil {
		_ = b.Close()
		if pgerr.Denied(err) || ctx.Err() != nil {
			return nil, b.classify("connect", err)
		}
		return nil, driver.Unavailable(b.addr, fmt.Errorf("postgres: connect: %w", err))
	}
	return b, nil
}
