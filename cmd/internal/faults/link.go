package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// links holds the TCP proxies (toxiproxy, embedded) between the workers and
// the servers: one proxy per worker per server, so that a fault can cut one
// worker's links and leave the others alone.
type links struct {
	srv     *toxiproxy.ApiServer
	proxies [][]*toxiproxy.Proxy // [worker][server]; set up before any fault

	changeMu sync.Mutex                     // serializes toxic changes on every proxy
	settled  map[*toxiproxy.Proxy]time.Time // under changeMu: no toxic is added to the proxy before
}

// linkDropGap is how long a toxic added to a proxy waits after a closing
// toxic (timeout) was removed from it. toxiproxy (v2.5, and v2.12 alike)
// leaves each connection that removal closes with a toxic stub too many
// until the connection's goroutine drops its link; a toxic added to that
// proxy meanwhile can panic (index out of range in ToxicLink.AddToxic) and
// end the test binary, as it did once in a 30-minute soak. A mitigation:
// the race was not reproduced in isolation.
const linkDropGap = 50 * time.Millisecond

// addToxic adds a toxic in toxiproxy's JSON form to p.
func (l *links) addToxic(p *toxiproxy.Proxy, js string) error {
	l.changeMu.Lock()
	defer l.changeMu.Unlock()
	if wait := time.Until(l.settled[p]); wait > 0 {
		time.Sleep(wait)
	}
	_, err := p.Toxics.AddToxicJson(strings.NewReader(js))
	return err
}

// removeToxic removes p's toxic name, of type typ.
func (l *links) removeToxic(p *toxiproxy.Proxy, name, typ string) {
	l.changeMu.Lock()
	defer l.changeMu.Unlock()
	_ = p.Toxics.RemoveToxic(context.Background(), name)
	if typ == "timeout" {
		if l.settled == nil {
			l.settled = map[*toxiproxy.Proxy]time.Time{}
		}
		l.settled[p] = time.Now().Add(linkDropGap)
	}
}

func newLinks() *links {
	return &links{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// add starts worker w's proxies to upstreams and returns their addresses.
func (l *links) add(w int, upstreams []string) ([]string, error) {
	for len(l.proxies) <= w {
		l.proxies = append(l.proxies, nil)
	}
	addrs := make([]string, len(upstreams))
	for i, up := range upstreams {
		p := toxiproxy.NewProxy(l.srv, fmt.Sprintf("w%d-s%d", w, i), "127.0.0.1:0", up)
		if err := p.Start(); err != nil {
			return nil, fmt.Errorf("proxy to %s: %w", up, err)
		}
		l.proxies[w] = append(l.proxies[w], p)
		addrs[i] = p.Listen
	}
	return addrs, nil
}

// toxic adds a toxic (toxiproxy's JSON form) in both directions on every
// proxy of the given workers; the returned function removes them.
func (l *links) toxic(workers []int, typ string, attrs string) (remove func(), err error) {
	var undo []func()
	remove = func() {
		for _, f := range undo {
			f()
		}
	}
	for _, w := range workers {
		for _, p := range l.proxies[w] {
			for _, stream := range []string{"upstream", "downstream"} {
				name := typ + "-" + stream
				js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, typ, stream, attrs)
				if err := l.addToxic(p, js); err != nil {
					remove()
					return nil, fmt.Errorf("add %s toxic: %w", typ, err)
				}
				undo = append(undo, func() { l.removeToxic(p, name, typ) })
			}
		}
	}
	return remove, nil
}

func (l *links) close() {
	for _, ps := range l.proxies {
		for _, p := range ps {
			p.Stop()
		}
	}
}

// Blackhole cuts the current holder's links to every server for d: bytes
// sent either way are dropped (toxiproxy's "timeout" toxic with no
// timeout), connections stay open. Its renewals stall, as in a partition.
func Blackhole(d time.Duration) Fault {
	return Fault{
		Name: "blackhole-holder", Applies: proxied, Tolerated: never, Link: true,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			w, tok, err := env.waitHolder(ctx)
			if err != nil {
				return Injected{}, err
			}
			in := Injected{Worker: w.ID, Token: tok, Start: Mono()}
			remove, err := env.links.toxic([]int{w.ID}, "timeout", `{"timeout":0}`)
			if err != nil {
				return in, err
			}
			sleep(ctx, d)
			remove()
			in.End = Mono()
			return in, nil
		},
	}
}

// Delay adds latency (each way) to every worker's links for d.
func Delay(latency, d time.Duration) Fault {
	return Fault{
		Name: "delay-" + latency.String(), Applies: proxied, Tolerated: never, Link: true,
		Inject: func(ctx context.Context, env *Env) (Injected, error) {
			var all []int
			for _, w := range env.Workers {
				all = append(all, w.ID)
			}
			in := Injected{Worker: -1, Start: Mono()}
			remove, err := env.links.toxic(all, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`,
				latency.Milliseconds(), latency.Milliseconds()/4))
			if err != nil {
				return in, err
			}
			sleep(ctx, d)
			remove()
			in.End = Mono()
			return in, nil
		},
	}
}
