package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/distlock/distlock/internal/testserver"
)

// The late toxic holds the first request after it is added, and go-redis,
// past its read timeout, resends it on a new connection that gets through
// first: the request lands twice, the held copy last.
func TestLateToxicDeliversHeldCopyAfterResend(t *testing.T) {
	srv := testserver.Redis(t)
	ts := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(ts, "late", "127.0.0.1:0", srv.Addr())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	c := goredis.NewClient(&goredis.Options{Addr: p.Listen, ReadTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	defer c.Close()
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	js := fmt.Sprintf(`{"name":"late","type":"late","stream":"upstream","attributes":{"hold":%d,"count":1}}`, 600)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	// Each copy appends its own arrival: "x" once per landing.
	if err := c.Append(ctx, "landed", "x").Err(); err != nil {
		t.Fatalf("the resend did not get through: %v", err)
	}
	answered := time.Since(t0)
	if got := admin.Get(ctx, "landed").Val(); got != "x" {
		t.Fatalf("after the answer (%v) the key is %q, want one landing", answered, got)
	}
	time.Sleep(800 * time.Millisecond)
	if got := admin.Get(ctx, "landed").Val(); got != "xx" {
		t.Fatalf("the held copy did not land after the resend: %q (answered after %v)", got, answered)
	}
	if err := p.Toxics.RemoveToxic(context.Background(), "late"); err != nil {
		t.Fatal(err)
	}
	t.Logf("answered after %v (the resend); the held copy landed later", answered)
}
