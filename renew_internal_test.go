package distlock

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The renewer's due times keep their monotonic clock reading: compared by
// the wall clock, a clock stepped back would delay every renewal past the
// (monotonic) lease deadlines. (time.Time.Truncate drops the reading.)
func TestRenewAtIsMonotonic(t *testing.T) {
	b := &sessionBackend{owner: map[string]string{}}
	l, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(context.Background(), "k", WithTTL(3*time.Second), WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	r := l.(*locker).renewer
	r.mu.Lock()
	at := ls.renewAt
	r.mu.Unlock()
	if !strings.Contains(at.String(), " m=") {
		t.Errorf("renewAt %v carries no monotonic reading: renewals would follow the wall clock", at)
	}
}
