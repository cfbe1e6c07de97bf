package redlock

import (
	"errors"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
)

// refused is the error of a call that failed because so many nodes refused
// the client (see redisnode.Denied) that no majority could grant it:
// ErrAccessDenied, naming each refusal, rather than ErrNoQuorum, since
// asking again gets the same answers. It is nil otherwise.
func (b *backend) refused(what string, t tally) error {
	var errs []error
	for i := range b.nodes {
		if err, ok := t.failed[i]; ok && redisnode.Denied(err) {
			errs = append(errs, redisnode.Classify(nodeAddr(b.nodes[i].client, i), err))
		}
	}
	if len(b.nodes)-len(errs) >= b.quorum {
		return nil
	}
	return fmt.Errorf("redlock: %s: %d of %d nodes refused the client (need %d): %w",
		what, len(errs), len(b.nodes), b.quorum, errors.Join(errs...))
}

// nodeAddr names node i (client c) in errors and logs.
func nodeAddr(c goredis.UniversalClient, i int) string {
	if cl, ok := c.(*goredis.Client); ok {
		return cl.Options().Addr
	}
	return fmt.Sprintf("node %d", i)
}

// onDenied returns the function node i's notifier calls, once, when the
// node refuses release notices: waiters then poll that node.
func onDenied(logger *slog.Logger, prefix, addr string) func(error) {
	return func(err error) {
		logger.Warn("distlock: redlock: a node refuses release notices (SUBSCRIBE to "+prefix+"{…}:released); waiters poll it instead",
			slog.String("addr", addr), slog.Any("error", err))
	}
}
