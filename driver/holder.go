package driver

import "time"

// Holder is what Inspect reports of a key's lock, as the server sees it;
// distlock.Holder documents each field.
type Holder struct {
	Held    bool
	Token   int64
	Value   string
	TTL     time.Duration
	Waiters int // -1 where the backend keeps no queue
}
