package distlock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Opener makes a Locker from a URL. Backend packages register one per scheme
// in their init function; the URL's query has already lost the portable
// parameters, which arrive as opts.
type Opener func(ctx context.Context, u *url.URL, opts ...Option) (Locker, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a backend available to Open under scheme (without "://").
// Like database/sql.Register it is meant for init functions and panics if
// the scheme is empty, opener is nil, or the scheme is taken.
func Register(scheme string, opener Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if scheme == "" || opener == nil {
		panic("distlock: Register needs a scheme and an opener")
	}
	if _, dup := registry[scheme]; dup {
		panic("distlock: Register called twice for scheme " + scheme)
	}
	registry[scheme] = opener
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open returns a Locker for a URL such as "mem://", "redis://host:6379/0",
// "etcd://host1:2379,host2:2379" or "zk://host:2181/locks". The backend's
// package must be imported (for its init) — blank-import
// github.com/distlock/distlock/all for every backend. Query parameters
// every backend understands:
//
//	ttl=30s             lease TTL (WithTTL)
//	autorenew=true      renew leases from Acquire in the background (WithAutoRenew)
//	renew_interval=10s  (WithRenewInterval)
//
// Backends document their own; an unknown parameter is an error. opts are
// applied after the URL's settings.
func Open(ctx context.Context, rawURL string, opts ...Option) (Locker, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme (known: %s)", ErrInvalidURL, rawURL, strings.Join(Schemes(), ", "))
	}
	registryMu.RLock()
	opener := registry[u.Scheme]
	registryMu.RUnlock()
	if opener == nil {
		return nil, fmt.Errorf("%w: unknown scheme %q (known: %s; is the backend package imported?)",
			ErrInvalidURL, u.Scheme, strings.Join(Schemes(), ", "))
	}
	q := NewQuery(u)
	var urlOpts []Option
	if d, ok := q.Duration("ttl"); ok {
		urlOpts = append(urlOpts, WithTTL(d))
	}
	if b, ok := q.Bool("autorenew"); ok {
		urlOpts = append(urlOpts, WithAutoRenew(b))
	}
	if d, ok := q.Duration("renew_interval"); ok {
		urlOpts = append(urlOpts, WithRenewInterval(d))
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	u2 := *u
	u2.RawQuery = q.Rest().Encode()
	return opener(ctx, &u2, append(urlOpts, opts...)...)
}

// Query reads a URL's query parameters for an Opener: each getter removes
// the parameter it reads, parse errors are kept for Err, and Unknown reports
// what no getter asked for.
type Query struct {
	v   url.Values
	err error
}

// NewQuery starts reading u's query.
func NewQuery(u *url.URL) *Query { return &Query{v: u.Query()} }

func (q *Query) take(name string) (string, bool) {
	vs, ok := q.v[name]
	if !ok {
		return "", false
	}
	delete(q.v, name)
	if len(vs) != 1 {
		q.fail("parameter %q given %d times", name, len(vs))
		return "", false
	}
	return vs[0], true
}

func (q *Query) fail(format string, args ...any) {
	if q.err == nil {
		q.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidURL}, args...)...)
	}
}

// String returns the parameter's value.
func (q *Query) String(name string) (string, bool) { return q.take(name) }

// Duration returns the parameter parsed by time.ParseDuration.
func (q *Query) Duration(name string) (time.Duration, bool) {
	s, ok := q.take(name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		q.fail("parameter %s=%q: %v", name, s, err)
		return 0, false
	}
	return d, true
}

// Int returns the parameter parsed as a decimal integer.
func (q *Query) Int(name string) (int, bool) {
	s, ok := q.take(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		q.fail("parameter %s=%q is not an integer", name, s)
		return 0, false
	}
	return n, true
}

// Bool returns the parameter parsed by strconv.ParseBool.
func (q *Query) Bool(name string) (bool, bool) {
	s, ok := q.take(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		q.fail("parameter %s=%q is not a boolean", name, s)
		return false, false
	}
	return b, true
}

// Rest returns the parameters not read yet.
func (q *Query) Rest() url.Values { return q.v }

// Err returns the first parse error.
func (q *Query) Err() error { return q.err }

// Done returns the first parse error, or an error naming the parameters no
// getter read: call it after reading every parameter the backend knows.
func (q *Query) Done() error {
	if q.err != nil {
		return q.err
	}
	if len(q.v) > 0 {
		names := make([]string, 0, len(q.v))
		for k := range q.v {
			names = append(names, k)
		}
		slices.Sort(names)
		return fmt.Errorf("%w: unknown parameter(s) %s", ErrInvalidURL, strings.Join(names, ", "))
	}
	return nil
}
