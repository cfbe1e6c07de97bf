// Package urlparam reads the part of a backend URL that every backend
// reads the same way: the query's parameters, the host list, the TLS and
// credential parameters, and a redacted form for errors. Backend openers
// (driver.Opener) use it.
package urlparam

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Query reads a URL's query parameters for a driver.Opener: each getter removes
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
		q.err = fmt.Errorf("%w: "+format, append([]any{driver.ErrInvalidURL}, args...)...)
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

// Int64 returns the parameter parsed as a decimal 64-bit integer.
func (q *Query) Int64(name string) (int64, bool) {
	s, ok := q.take(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		q.fail("parameter %s=%q is not a 64-bit integer", name, s)
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
		return fmt.Errorf("%w: unknown parameter(s) %s", driver.ErrInvalidURL, strings.Join(names, ", "))
	}
	return nil
}

// Hosts returns the comma-separated host:port list of u, each checked: a
// URL without a host, an address without a port (when defaultPort is
// empty) or with a bad one is driver.ErrInvalidURL. Openers of multi-host schemes
// share it.
func Hosts(u *url.URL, defaultPort string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil && defaultPort != "" {
			host, port, err = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort, nil
			h = net.JoinHostPort(host, port)
		}
		if err != nil || host == "" {
			return nil, fmt.Errorf("%w: %s://…: %q is not host:port", driver.ErrInvalidURL, u.Scheme, h)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("%w: %s://…: bad port in %q", driver.ErrInvalidURL, u.Scheme, h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: %s:// URL names no server (want %s://host:port,…)", driver.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	return hosts, nil
}

// Timeout returns the parameter as a positive duration, or def when absent.
func (q *Query) Timeout(name string, def time.Duration) time.Duration {
	d, ok := q.Duration(name)
	switch {
	case !ok:
		return def
	case d <= 0:
		q.fail("parameter %s=%v must be positive", name, d)
		return def
	}
	return d
}
