package distlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
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
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opener, ok := driver.Lookup(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("%w: unknown scheme %q (known: %s; is the backend package imported?)",
			ErrInvalidURL, u.Scheme, strings.Join(Schemes(), ", "))
	}
	urlOpts, err := commonOptions(u)
	if err != nil {
		return nil, err
	}
	opts = append(urlOpts, opts...)
	// Bad values fail before any connection is made.
	if s, err := driver.Apply(defaultSettings(), driver.Options(opts)); err != nil {
		return nil, err
	} else if err := validateTTL(s.TTL); err != nil {
		return nil, err
	}
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := opener(ctx, u, backendOpts)
	if err != nil {
		return nil, err
	}
	return New(b, lockerOpts...) // closes b if it fails
}

// parseURL parses rawURL, which must have a scheme. Its errors never
// quote the URL's password.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if (err != nil && urlparam.HasUserinfo(rawURL)) || (err == nil && urlparam.MisreadUserinfo(u)) {
		// url.Parse's message may quote a piece of the password.
		return nil, fmt.Errorf("%w: %q: malformed user information: percent-encode '/', '?', '#' and '@' in a user or password (url.UserPassword does)",
			ErrInvalidURL, urlparam.Redact(rawURL))
	}
	if err != nil {
		// url.Error quotes the whole URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, urlparam.Redact(rawURL), err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme (known: %s)", ErrInvalidURL, urlparam.Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	return u, nil
}

// commonOptions takes the parameters every backend understands out of u's
// query, leaving the backend's own.
func commonOptions(u *url.URL) ([]Option, error) {
	q := urlparam.NewQuery(u)
	var opts []Option
	if d, ok := q.Duration("ttl"); ok {
		opts = append(opts, WithTTL(d))
	}
	if b, ok := q.Bool("autorenew"); ok {
		opts = append(opts, WithAutoRenew(b))
	}
	if d, ok := q.Duration("renew_interval"); ok {
		opts = append(opts, WithRenewInterval(d))
	}
	if n, ok := q.Int64("fence_epoch"); ok {
		opts = append(opts, WithFenceEpoch(n))
	}
	if err := q.Err(); err != nil {
		return nil, err
	}
	u.RawQuery = q.Rest().Encode()
	return opts, nil
}
