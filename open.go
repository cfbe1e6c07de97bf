package distlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/distlock/distlock/driver"
)

// Schemes lists the URL schemes of the backends linked into the program,
// sorted.
func Schemes() []string { return driver.Schemes() }

// Open returns a Locker for a URL such as "mem://", "redis://host:6379/0",
// "etcd://host1:2379,host2:2379" or "zk://host:2181/locks". The backend's
// package must be imported (for its init) — blank-import
// github.com/distlock/distlock/all for every backend. Query parameters
// every backend understands:
//
//	ttl=30s             lease TTL (WithTTL)
//	autorenew=true      renew leases from Acquire in the background (WithAutoRenew)
//	renew_interval=10s  (WithRenewInterval)
//	fence_epoch=1       the epoch of every lease's Fence (WithFenceEpoch)
//
// Backends document their own; an unknown parameter is an error. opts are
// applied after the URL's settings.
func Open(ctx context.Context, rawURL string, opts ...Option) (Locker, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidOption)
	}
	u, err := url.Parse(rawURL)
	if (err != nil && driver.HasUserinfo(rawURL)) || (err == nil && driver.MisreadUserinfo(u)) {
		// url.Parse's message may quote a piece of the password.
		return nil, fmt.Errorf("%w: %q: malformed user information: percent-encode '/', '?', '#' and '@' in a user or password (url.UserPassword does)",
			ErrInvalidURL, driver.Redact(rawURL))
	}
	if err != nil {
		// url.Error quotes the whole URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, driver.Redact(rawURL), err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme (known: %s)", ErrInvalidURL, driver.Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	opener, ok := driver.Lookup(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("%w: unknown scheme %q (known: %s; is the backend package imported?)",
			ErrInvalidURL, u.Scheme, strings.Join(Schemes(), ", "))
	}
	q := driver.NewQuery(u)
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
	if n, ok := q.Int64("fence_epoch"); ok {
		urlOpts = append(urlOpts, WithFenceEpoch(n))
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	u2 := *u
	u2.RawQuery = q.Rest().Encode()
	opts = append(urlOpts, opts...)
	// Bad values fail before any connection is made.
	if s, err := driver.Check(defaultSettings(), opts); err != nil {
		return nil, err
	} else if err := validateTTL(s.TTL); err != nil {
		return nil, err
	}
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := opener(ctx, &u2, backendOpts)
	if err != nil {
		return nil, err
	}
	return New(b, lockerOpts...) // closes b if it fails
}
