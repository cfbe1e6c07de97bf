// Package urlparam reads the part of a backend URL that every backend
// reads the same way: the query's parameters, the host list, the TLS and
// credential parameters, and a redacted form for errors. Backend openers
// (driver.Opener) use it.
package urlparam

import (
	"fmt"
	"maps"
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
	v     url.Values
	err   error
	known map[string]struct{} // every name a getter or Pass asked for
}

// Portable names the parameters distlock.Open reads for every backend
// before the backend's opener sees the query; Done lists them as valid.
var Portable = []string{"autorenew", "fence_epoch", "renew_interval", "ttl"}

// NewQuery starts reading u's query.
func NewQuery(u *url.URL) *Query {
	return &Query{v: u.Query(), known: map[string]struct{}{}}
}

func (q *Query) take(name string) (string, bool) {
	q.known[name] = struct{}{}
	vs, ok := q.v[name]
	if !ok {
		return "", false
	}
	delete(q.v, name)
	if len(vs) != 1 {
		q.fail("parameter %s given %d times (give it once)", name, len(vs))
		return "", false
	}
	return vs[0], true
}

// Pass takes the named parameters out for another parser (a client
// library's URL reader), all values of each, and counts them as valid for
// Done.
func (q *Query) Pass(names ...string) url.Values {
	out := url.Values{}
	for _, n := range names {
		q.known[n] = struct{}{}
		if vs, ok := q.v[n]; ok {
			out[n] = vs
			delete(q.v, n)
		}
	}
	return out
}

// Malformed is the error for a parameter whose value is not what the
// backend wants: want says what it wants, e.g. "not a duration (e.g. 30s)".
func Malformed(name, value, want string) error {
	return fmt.Errorf("%w: parameter %s=%q: %s", driver.ErrInvalidURL, name, value, want)
}

func (q *Query) malformed(name, value, want string) {
	if q.err == nil {
		q.err = Malformed(name, value, want)
	}
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
		q.malformed(name, s, "not a duration (e.g. 30s)")
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
		q.malformed(name, s, "not an integer")
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
		q.malformed(name, s, "not a 64-bit integer")
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
		q.malformed(name, s, "not a boolean (true or false)")
		return false, false
	}
	return b, true
}

// Rest returns the parameters not read yet.
func (q *Query) Rest() url.Values { return q.v }

// Err returns the first parse error.
func (q *Query) Err() error { return q.err }

// Done returns the first parse error, or an error naming the parameters no
// getter read, with the nearest valid name of each and the valid ones
// (those a getter or Pass asked for, and Portable): call it after reading
// every parameter the backend knows.
func (q *Query) Done() error {
	if q.err != nil {
		return q.err
	}
	if len(q.v) == 0 {
		return nil
	}
	valid := slices.Concat(Portable, slices.Collect(maps.Keys(q.known)))
	slices.Sort(valid)
	valid = slices.Compact(valid)
	unknown := slices.Sorted(maps.Keys(q.v))
	return Unknown(unknown, valid)
}

// Unknown is the error for parameters names that a backend does not read,
// valid the sorted names it does: each name with the nearest valid one when
// that is close, then the valid names.
func Unknown(names, valid []string) error {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = strconv.Quote(n)
		if s := nearest(n, valid); s != "" {
			parts[i] += " (did you mean " + s + "?)"
		}
	}
	noun := "parameter"
	if len(names) > 1 {
		noun = "parameters"
	}
	return fmt.Errorf("%w: unknown %s %s; valid: %s", driver.ErrInvalidURL, noun,
		strings.Join(parts, ", "), strings.Join(valid, ", "))
}

// nearest returns the names of valid closest to n by edit distance, if at
// most 2 edits and fewer than half of n's letters, as "a", "a" or "b", or
// "" when none is that close. Equally close names are all given, since
// either may be meant.
func nearest(n string, valid []string) string {
	var best []string
	bestD := min(2, len(n)/2) + 1
	for _, v := range valid {
		switch d := editDistance(n, v); {
		case d < bestD:
			best, bestD = []string{strconv.Quote(v)}, d
		case d == bestD && len(best) > 0:
			best = append(best, strconv.Quote(v))
		}
	}
	if len(best) > 3 {
		return "" // too many to help
	}
	return strings.Join(best, " or ")
}

// editDistance is the optimal-string-alignment distance of a and b:
// insertions, deletions, substitutions and swaps of adjacent bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
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
	s, ok := q.take(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		q.malformed(name, s, "not a positive duration (e.g. 30s)")
		return def
	}
	return d
}
