package redlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisnode"
)

// open is the Opener of redlock:// URLs:
//
//	redlock://[user:password@]host1:port,host2:port,host3:port[/db]?prefix=app:&node_timeout=20ms
//
// Parameters: prefix (WithKeyPrefix), node_timeout (WithNodeTimeout),
// dial_timeout (go-redis's, default 1s); the user, password and db apply to
// every node. Anything else is an error, and so is a server named twice
// (see distinctHosts). Open PINGs every node (bounded, with the name
// lookups of that check, by the dial timeout and ctx) and fails with an
// error matching ErrUnavailable, naming the nodes, when fewer than a
// majority answer.
func open(ctx context.Context, u *url.URL, opts []distlock.Option) (driver.Backend, error) {
	q := driver.NewQuery(u)
	var bopts []distlock.Option
	if p, ok := q.String("prefix"); ok {
		bopts = append(bopts, WithKeyPrefix(p))
	}
	if d, ok := q.Duration("node_timeout"); ok {
		bopts = append(bopts, WithNodeTimeout(d))
	}
	dial := q.Timeout("dial_timeout", time.Second)
	if err := q.Done(); err != nil {
		return nil, err
	}
	nodes, err := driver.Hosts(u, "")
	if err != nil {
		return nil, err
	}
	db, err := database(u)
	if err != nil {
		return nil, err
	}
	// One deadline for the name lookups of the duplicate check and the PINGs.
	ctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	if err := distinctHosts(ctx, nodes); err != nil {
		return nil, err
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	var clients []goredis.UniversalClient
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for _, h := range nodes {
		clients = append(clients, goredis.NewClient(&goredis.Options{
			Addr: h, Username: user, Password: pass, DB: db,
			DialTimeout: dial, ContextTimeoutEnabled: true,
		}))
	}
	opts = append(append(bopts, opts...), WithCloseClients(true))
	o, err := driver.ResolveBackend("redlock", opts)
	if err != nil {
		closeAll()
		return nil, err // before dialling
	}
	unroute := redisnode.RouteLogs(o.Logger) // the clients are ours, so are their logs
	if err := pingQuorum(ctx, clients, dial); err != nil {
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

// pingQuorum checks that a majority of the nodes answer a PING within dial.
func pingQuorum(ctx context.Context, clients []goredis.UniversalClient, dial time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	var failed []error
	var addrs []string
	for i, err := range errs {
		if err != nil {
			addr := clients[i].(*goredis.Client).Options().Addr
			addrs = append(addrs, addr)
			failed = append(failed, fmt.Errorf("%s: %w", addr, err))
		}
	}
	if len(failed) > len(clients)/2 {
		return driver.Unavailable(strings.Join(addrs, ","),
			fmt.Errorf("%d of %d nodes did not answer: %w", len(failed), len(clients), errors.Join(failed...)))
	}
	return nil
}
