package testserver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestStartRedis checks the non-testing entry point: a ready server, and a
// Close that kills it and removes its directory.
func TestStartRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	s, err := Start(ctx, KindRedis, t.TempDir())
	if errors.Is(err, ErrMissing) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := redisPing(ctx, s.Addr()); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if s.Kind() != KindRedis {
		t.Errorf("Kind() = %q", s.Kind())
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still there after Close (%v)", dir, err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
	defer pcancel()
	if err := redisPing(pctx, s.Addr()); err == nil {
		t.Error("PING succeeded after Close")
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Kind("nope"), t.TempDir()); err == nil {
		t.Error("unknown kind: no error")
	}
	if _, err := StartCluster(ctx, KindRedis, 0, t.TempDir()); err == nil {
		t.Error("n = 0: no error")
	}
	if _, err := StartCluster(ctx, KindPostgres, 2, t.TempDir()); err == nil {
		t.Error("two postgres: no error")
	}
	if _, err := lookBinary("x", "/nonexistent/x"); !errors.Is(err, ErrMissing) {
		t.Errorf("lookBinary of a missing file: %v, want ErrMissing", err)
	}
}
