package redisnode

import (
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// NewNotifierHealth is NewNotifier with its health-check timing, so tests
// can show a silent connection is dropped without waiting for the defaults.
func NewNotifierHealth(client goredis.UniversalClient, prefix string, every, pongWait time.Duration) *Notifier {
	return newNotifier(client, prefix, nil, every, pongWait)
}

// ExtendScriptHashes are the SHA1s of the repairing extend and its fast
// path, for tests that check which of them ran (SCRIPT EXISTS).
func ExtendScriptHashes() (repairing, fast string) {
	return extendWords.hash.(string), extendFast.hash.(string)
}
