package redlock

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

// defaultPort is the port go-redis dials when an address has none.
const defaultPort = "6379"

// failoverAddr is the Options().Addr of every go-redis Sentinel client: the
// server it dials is chosen at dial time, so the address says nothing.
const failoverAddr = "FailoverClient"

const countsTwice = "its answer would count twice toward the quorum"

// endpoint is one node's address, as given (shown in errors; it never holds
// a password) and split for comparison.
type endpoint struct {
	shown      string
	unix       bool // a socket path, compared as a cleaned path
	host, port string
}

// tcpEndpoint splits a TCP address, applying Redis's default port when it
// has none, as go-redis does.
func tcpEndpoint(addr string) endpoint {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), defaultPort
	}
	if port == "" {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	return endpoint{shown: addr, host: host, port: port}
}

// sameServer returns the first pair i < j of endpoints that reach one
// server, and the address they share. Two endpoints are the same server
// when the addresses their hosts resolve to intersect on the same port. A
// host name that does not resolve within ctx stands for itself (case and a
// trailing dot aside): only the same spelling matches it, and dialling it
// fails later, where it did before.
func sameServer(ctx context.Context, eps []endpoint) (i, j int, shared string, found bool) {
	resolved := resolveHosts(ctx, eps)
	first := map[string]int{}
	for j, ep := range eps {
		for _, key := range endpointKeys(ep, resolved) {
			if i, dup := first[key]; dup && i != j {
				return i, j, key, true
			}
			first[key] = j
		}
	}
	return 0, 0, "", false
}

// endpointKeys are the addresses by which ep is compared.
func endpointKeys(ep endpoint, resolved map[string][]string) []string {
	if ep.unix {
		return []string{"unix:" + filepath.Clean(ep.shown)}
	}
	ips := resolved[hostKey(ep.host)]
	keys := make([]string, 0, len(ips))
	for _, ip := range ips {
		keys = append(keys, net.JoinHostPort(ip, ep.port))
	}
	return keys
}

func hostKey(host string) string { return strings.ToLower(strings.TrimSuffix(host, ".")) }

// resolveHosts maps each host of eps (by hostKey) to its IP addresses, the
// names looked up in parallel and bounded by ctx. An IP literal maps to
// itself (an IPv4-mapped IPv6 address to its IPv4 form), a name that does
// not resolve to its hostKey.
func resolveHosts(ctx context.Context, eps []endpoint) map[string][]string {
	out := map[string][]string{}
	var names []string
	for _, ep := range eps {
		host := hostKey(ep.host)
		if _, done := out[host]; done || ep.unix {
			continue
		}
		out[host] = []string{host} // a name until (unless) its lookup answers
		if ip, err := netip.ParseAddr(host); err == nil {
			out[host] = []string{ip.Unmap().String()}
		} else {
			names = append(names, host)
		}
	}
	found := make([][]string, len(names))
	var wg sync.WaitGroup
	for k, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ips, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
			for _, ip := range ips {
				found[k] = append(found[k], ip.Unmap().String())
			}
		}()
	}
	wg.Wait()
	for k, name := range names {
		if len(found[k]) > 0 {
			out[name] = found[k]
		}
	}
	return out
}

// distinctHosts refuses a URL's host list (host:port each, see urlparam.Hosts)
// that names one server twice, resolving names within ctx.
func distinctHosts(ctx context.Context, hosts []string) error {
	eps := make([]endpoint, len(hosts))
	for k, h := range hosts {
		eps[k] = tcpEndpoint(h)
	}
	if i, j, shared, dup := sameServer(ctx, eps); dup {
		return fmt.Errorf("%w: redlock: nodes %d (%s) and %d (%s) are one server (%s): %s",
			distlock.ErrInvalidURL, i+1, hosts[i], j+1, hosts[j], shared, countsTwice)
	}
	return nil
}

// distinctClients refuses clients that reach one server twice: the same
// client value twice, of any kind, or two *goredis.Client whose addresses
// are one server (see sameServer; names resolved within the longest of
// their dial timeouts). Other kinds of client (Ring, ClusterClient, a
// Sentinel client) do not say which server they dial and are not compared.
// A Dialer of the caller's (a tunnel per node) is given the Addr, so such
// clients name their nodes apart by Addr, whatever the Dialer makes of it.
func distinctClients(clients []goredis.UniversalClient) error {
	if i, j, dup := sameClient(clients); dup {
		return fmt.Errorf("%w: redlock: clients[%d] and clients[%d] are one client: %s",
			distlock.ErrInvalidOption, i, j, countsTwice)
	}
	var eps []endpoint
	var idx []int
	var dial time.Duration
	for k, c := range clients {
		rc, ok := c.(*goredis.Client)
		if !ok || rc == nil || rc.Options().Addr == failoverAddr {
			continue
		}
		o := rc.Options()
		ep := tcpEndpoint(o.Addr)
		if o.Network == "unix" {
			ep = endpoint{shown: o.Addr, unix: true}
		}
		eps, idx = append(eps, ep), append(idx, k)
		dial = max(dial, o.DialTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(dial, time.Second))
	defer cancel()
	if i, j, shared, dup := sameServer(ctx, eps); dup {
		return fmt.Errorf("%w: redlock: clients[%d] (%s) and clients[%d] (%s) reach one server (%s): %s",
			distlock.ErrInvalidOption, idx[i], eps[i].shown, idx[j], eps[j].shown, shared, countsTwice)
	}
	return nil
}

// sameClient returns the first pair of positions holding the same client
// (compared by pointer: a client value of another kind may not be
// comparable, and comparing it would panic).
func sameClient(clients []goredis.UniversalClient) (i, j int, found bool) {
	type ident struct {
		t reflect.Type
		p uintptr
	}
	first := map[ident]int{}
	for j, c := range clients {
		v := reflect.ValueOf(c)
		if v.Kind() != reflect.Pointer || v.IsNil() {
			continue
		}
		id := ident{v.Type(), v.Pointer()}
		if i, dup := first[id]; dup {
			return i, j, true
		}
		first[id] = j
	}
	return 0, 0, false
}
