// Package testutil holds small helpers shared by the module's tests.
package testutil

import (
	"bytes"
	"sync"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// log sink or a child process's output read while it is still written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Soon reports whether cond holds within 3 s, checking every 10 ms: for
// state that a call's background work (a give-back) or its answers after
// a majority decided (Redlock) write after the call returned.
func Soon(cond func() bool) bool {
	for end := time.Now().Add(3 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}
