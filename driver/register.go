package driver

import (
	"context"
	"net/url"
	"slices"
	"sync"
)

// Opener makes a Backend from a URL for distlock.Open. The URL's query has
// already lost the portable parameters (ttl, autorenew, renew_interval);
// opts are the caller's backend and shared options (see SplitOptions), to
// resolve with ResolveBackend, and the opener reads its own
// parameters with a [Query], builds its client, and checks that the server
// answers (bounded by ctx) so that a bad address fails at Open with an error
// matching ErrUnavailable. distlock.Open then wraps the Backend with the
// portable options.
type Opener func(ctx context.Context, u *url.URL, opts []Option) (Backend, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a backend available to distlock.Open under scheme (without
// "://"). Like database/sql.Register it is meant for init functions and
// panics if the scheme is empty, opener is nil, or the scheme is taken.
func Register(scheme string, opener Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if scheme == "" || opener == nil {
		panic("distlock/driver: Register needs a scheme and an opener")
	}
	if _, dup := registry[scheme]; dup {
		panic("distlock/driver: Register called twice for scheme " + scheme)
	}
	registry[scheme] = opener
}

// Lookup returns the opener registered for scheme.
func Lookup(scheme string) (Opener, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	o, ok := registry[scheme]
	return o, ok
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
