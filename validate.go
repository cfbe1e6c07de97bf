package distlock

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// ValidateKey reports whether key is acceptable to every backend: not empty,
// at most MaxKeyLen bytes, valid UTF-8 and free of control characters.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds a control character", ErrInvalidKey, key)
		}
	}
	return nil
}

func validateTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: %v (want 0 < TTL <= %v)", ErrInvalidTTL, ttl, MaxTTL)
	}
	return nil
}

// holderID derives a lease's public holder id from its owner value: a
// hash, so that storing it in a database does not reveal the owner value
// that proves ownership to the lock service.
func holderID(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(h[:12])
}

// newOwner returns a random 128-bit owner value: unique per lease, so that
// no other lease, process or host can pass an owner check by accident.
func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux (Go ≥1.24 it cannot fail)
	return hex.EncodeToString(b[:])
}
