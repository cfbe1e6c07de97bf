package urlparam

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Reachable dials each address (TCP) at once and returns nil as soon as one
// accepts, or an error matching ErrUnavailable naming them all when none
// does within timeout: openers call it first, so that refused or
// unresolvable addresses fail at once rather than after a client's own
// retries.
func Reachable(ctx context.Context, addrs []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		go func() {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", a)
			if err == nil {
				_ = c.Close()
			}
			errs <- err
		}()
	}
	var failed []error
	for range addrs {
		err := <-errs
		if err == nil {
			return nil
		}
		failed = append(failed, err)
	}
	return driver.Unavailable(strings.Join(addrs, ","), errors.Join(failed...))
}
