package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redisnode"
)

// EvictionPolicy returns the server's maxmemory-policy; for a Cluster, the
// riskiest policy among its masters.
func EvictionPolicy(ctx context.Context, client goredis.UniversalClient) (string, error) {
	get := func(ctx context.Context, c goredis.UniversalClient) (string, error) {
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return "", fmt.Errorf("CONFIG GET maxmemory-policy: %w", err)
		}
		p, ok := m["maxmemory-policy"]
		if !ok {
			return "", errors.New("CONFIG GET maxmemory-policy: no value")
		}
		return p, nil
	}
	cc, ok := client.(*goredis.ClusterClient)
	if !ok {
		return get(ctx, client)
	}
	var mu sync.Mutex
	worst := ""
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		p, err := get(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		if worst == "" || evictionRisk(p) > evictionRisk(worst) {
			worst = p
		}
		mu.Unlock()
		return nil
	})
	return worst, err
}

// evictionRisk ranks policies: 2 can evict the counter, 1 can evict locks.
func evictionRisk(policy string) int {
	switch {
	case strings.HasPrefix(policy, "allkeys-"):
		return 2
	case strings.HasPrefix(policy, "volatile-"):
		return 1
	}
	return 0
}

func checkEviction(ctx context.Context, client goredis.UniversalClient, mode EvictionCheck, logger *slog.Logger) error {
	if mode == EvictionIgnore {
		return nil
	}
	policy, err := EvictionPolicy(ctx, client)
	if err != nil {
		if mode == EvictionRefuse {
			// A refused CONFIG GET is ErrAccessDenied too: asking again will
			// not help, and the CLI tells it apart from a down server.
			return fmt.Errorf("%w: cannot read it (use WithEvictionCheck(EvictionIgnore) where CONFIG is disabled): %w",
				ErrEvictionPolicy, redisnode.Classify(clientAddr(client), err))
		}
		logger.Warn("distlock: redis: could not check maxmemory-policy; if it is allkeys-*, fencing tokens can repeat",
			slog.Any("error", err))
		return nil
	}
	switch evictionRisk(policy) {
	case 2:
		if mode == EvictionRefuse {
			return fmt.Errorf("%w: %s (set noeviction or volatile-*)", ErrEvictionPolicy, policy)
		}
		logger.Warn("distlock: redis: maxmemory-policy can evict the never-expiring token counter; fencing tokens can then repeat",
			slog.String("maxmemory-policy", policy))
	case 1:
		logger.Warn("distlock: redis: maxmemory-policy can evict held locks before their TTL; tokens stay safe",
			slog.String("maxmemory-policy", policy))
	}
	return nil
}
