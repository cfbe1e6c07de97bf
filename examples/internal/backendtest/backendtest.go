// Package backendtest starts real lock and database servers for the
// examples' tests, with the library's internal/testserver. Only tests import
// it: the examples themselves use the public API alone, so each can be
// copied out of the repository.
package backendtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/internal/testserver"
)

// Backend is one lock backend an example runs against.
type Backend struct {
	Name string
	// URL starts the backend's servers, if any, for t (they stop when t
	// ends) and returns the URL naming them.
	URL func(t *testing.T) string
}

var memN atomic.Int64

// Backends are mem:// and every server backend, each on servers of its own.
var Backends = []Backend{
	{"mem", func(t *testing.T) string { return fmt.Sprintf("mem://test-%d", memN.Add(1)) }},
	{"redis", func(t *testing.T) string { return "redis://" + testserver.Redis(t).Addr() }},
	{"redlock", func(t *testing.T) string {
		var addrs []string
		for _, s := range testserver.RedisN(t, 3) {
			addrs = append(addrs, s.Addr())
		}
		return "redlock://" + strings.Join(addrs, ",")
	}},
	{"etcd", func(t *testing.T) string { return "etcd://" + testserver.Etcd(t).Addr() }},
	{"zk", func(t *testing.T) string { return "zk://" + testserver.ZooKeeper(t).Addr() + "/locks" }},
}

// Each runs fn as a parallel subtest per backend named in names (all of
// them when names is empty), with the backend's URL.
func Each(t *testing.T, names []string, fn func(t *testing.T, url string)) {
	for _, b := range Backends {
		if len(names) > 0 && !slices.Contains(names, b.Name) {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.URL(t))
		})
	}
}

// Postgres starts a PostgreSQL server (fsync off: nothing here survives the
// test) and returns a function that creates a fresh database on it and
// returns its DSN, so that parallel tests do not share tables.
func Postgres(t *testing.T) (newDB func(t *testing.T) string) {
	srv := testserver.Postgres(t, testserver.WithPostgresFsync(false))
	var n atomic.Int64
	return func(t *testing.T) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		name := fmt.Sprintf("test%d", n.Add(1))
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		return strings.Replace(srv.DSN(), "/postgres?", "/"+name+"?", 1)
	}
}
