package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
	"github.com/distlock/distlock/internal/redisnode"
)

// open is the Opener of redlock:// URLs:
//
//	redlock://[user:password@]host1:port,host2:port,host3:port[/db]?prefix=app:&node_timeout=20ms
//
// Parameters: prefix (WithKeyPrefix), node_timeout (WithNodeTimeout),
// dial_timeout (go-redis's, default 1s), and the TLS and credential
// parameters of package driver/urlparam (tls=true, ca_file, cert_file, key_file,
// server_name, skip_verify, password_file); the user, password, TLS
// settings and db apply to every node, each node's certificate checked for
// its own host unless server_name is given. Anything else is an error, and
// so is a server named twice (see distinctHosts). Open PINGs every node
// (bounded, with the name lookups of that check, by the dial timeout and
// ctx) and fails, naming the nodes, when fewer than a majority answer:
// with an error matching ErrAccessDenied when the refusals alone (a wrong
// password, a rejected certificate) leave no majority, ErrUnavailable
// otherwise.
func open(ctx context.Context, u *url.URL, opts []driver.Option) (driver.Backend, error) {
	q := urlparam.NewQuery(u)
	var bopts []driver.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p).DriverOption())
	}
	if d, ok := q.Duration("node_timeout"); ok {
		bopts = append(bopts, WithNodeTimeout(d).DriverOption())
	}
	dial := q.Timeout("dial_timeout", time.Second)
	opts = append(append(bopts, opts...), WithCloseClients(true).DriverOption())
	o, err := driver.ResolveBackend("redlock", opts)
	if err != nil {
		return nil, err // before dialling
	}
	tp := urlparam.ReadTLS(q, false, o.TLS)
	user, pass, err := urlparam.Credentials(q, u)
	if err != nil {
		return nil, err
	}
	if err := q.Done(); err != nil {
		return nil, err
	}
	nodes, err := urlparam.Hosts(u, "")
	if err != nil {
		return nil, err
	}
	db, err := database(u)
	if err != nil {
		return nil, err
	}
	// One deadline for the name lookups of the duplicate check and the PINGs.
	ctx, cancel := context.WithTimeoutCause(ctx, dial, errNodeTimeout)
	defer cancel()
	if err := distinctHosts(ctx, nodes); err != nil {
		return nil, err
	}
	var clients []goredis.UniversalClient
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for _, h := range nodes {
		host, _, _ := net.SplitHostPort(h) // Hosts gives host:port
		cfg, err := tp.Config(host)
		if err != nil {
			closeAll()
			return nil, err
		}
		clients = append(clients, goredis.NewClient(&goredis.Options{
			Addr: h, Username: user, Password: pass, DB: db, TLSConfig: cfg,
			DialTimeout: dial, ContextTimeoutEnabled: true,
		}))
	}
	unroute := redisnode.RouteLogs(o.Logger) // the clients are ours, so are their logs
	if err := pingQuorum(ctx, clients, dial, tp.On); err != nil {
		closeAll()
		unroute()
		return nil, err
	}
	b, err := newBackend(clients, opts)
	if err != nil {
		closeAll()
		unroute()
		return nil, err
	}
	b.unroute = unroute
	return b, nil
}

// database returns the database number of u's path (0 without one).
func database(u *url.URL) (int, error) {
	p := strings.Trim(u.Path, "/")
	if p == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: redlock: database %q is not a number", distlock.ErrInvalidURL, p)
	}
	return n, nil
}

// pingQuorum checks that a majority of the nodes answer a PING within dial
// (tlsOn: over TLS).
func pingQuorum(ctx context.Context, clients []goredis.UniversalClient, dial time.Duration, tlsOn bool) error {
	ctx, cancel := context.WithTimeoutCause(ctx, dial, errNodeTimeout)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		notes := noteDials(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ping(ctx).Err()
			if errors.Is(context.Cause(ctx), errNodeTimeout) { // our deadline, not the caller's
				errs[i] = notes.explain(errs[i], dial)
			}
		}()
	}
	wg.Wait()
	var unreached, denied []error
	var addrs, refusals []string
	for i, err := range errs {
		if err == nil {
			continue
		}
		addr := nodeAddr(clients[i], i)
		addrs = append(addrs, addr)
		if err := redisnode.DialError(addr, tlsOn, err); redisnode.Denied(err) {
			denied, refusals = append(denied, err), append(refusals, err.Error())
		} else {
			unreached = append(unreached, err)
		}
	}
	failed := len(unreached) + len(denied)
	switch {
	case failed <= len(clients)/2:
		return nil
	case len(clients)-len(denied) <= len(clients)/2:
		// Refusals alone leave no majority: an answer, not an outage.
		return fmt.Errorf("redlock: %d of %d nodes refused the client: %w", len(denied), len(clients), errors.Join(denied...))
	}
	// Nodes out of reach decide it: the refusals are named, not wrapped,
	// so that the error is ErrUnavailable alone (Acquire tries again).
	why := ""
	if len(refusals) > 0 {
		why = fmt.Sprintf(" (and %d refused the client: %s)", len(refusals), strings.Join(refusals, "; "))
	}
	return driver.Unavailable(strings.Join(addrs, ","),
		fmt.Errorf("%d of %d nodes did not answer%s: %w", len(unreached), len(clients), why, errors.Join(unreached...)))
}
