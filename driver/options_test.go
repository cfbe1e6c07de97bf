package driver

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestDriftFor(t *testing.T) {
	if got := (Drift{}).For(time.Second); got != 0 {
		t.Errorf("zero Drift (WithDrift(0, 0)): %v, want no margin", got)
	}
	if got := (Drift{Factor: 0.1, Min: time.Millisecond}).For(time.Second); got != 101*time.Millisecond {
		t.Errorf("0.1·1s + 1ms = %v", got)
	}
	s := Settings{}
	s.DriftFactor, s.DriftMin = 0.2, 0
	if s.Drift(time.Second) != s.DriftRule().For(time.Second) || s.Drift(time.Second) != 200*time.Millisecond {
		t.Errorf("Settings.Drift %v and DriftRule().For %v disagree", s.Drift(time.Second), s.DriftRule().For(time.Second))
	}
}

func TestOptionScopes(t *testing.T) {
	type key struct{}
	own := BackendOption("b1", "WithX", key{}, 7)
	other := BackendOption("b2", "WithY", key{}, 8)
	call := NewOption("WithTTL", func(s *Settings) { s.TTL = time.Minute })
	lockerWide := NewOption("WithReleaseTimeout", func(s *Settings) { s.ReleaseTimeout = time.Minute })
	logger := slog.New(slog.DiscardHandler)
	shared := SharedOption("WithLogger", func(s *Settings) { s.Logger = logger })
	bad := InvalidOption("nope")

	locker, backend := SplitOptions([]Option{own, other, call, lockerWide, shared, bad})
	if len(locker) != 4 || len(backend) != 4 {
		t.Fatalf("split: %d for the Locker (want call, locker-wide, shared, invalid), %d for the backend (want own, other, shared, invalid)",
			len(locker), len(backend))
	}

	for name, tc := range map[string]struct {
		resolve func() (Settings, error)
		ok      bool
	}{
		"backend: own":               {func() (Settings, error) { return ResolveBackend("b1", []Option{own}) }, true},
		"backend: shared":            {func() (Settings, error) { return ResolveBackend("b1", []Option{shared}) }, true},
		"backend: another backend's": {func() (Settings, error) { return ResolveBackend("b1", []Option{other}) }, false},
		"backend: call option":       {func() (Settings, error) { return ResolveBackend("b1", []Option{call}) }, false},
		"backend: locker-wide":       {func() (Settings, error) { return ResolveBackend("b1", []Option{lockerWide}) }, false},
		"backend: invalid":           {func() (Settings, error) { return ResolveBackend("b1", []Option{bad}) }, false},
		"locker: portable":           {func() (Settings, error) { return ResolveLocker(Settings{}, "b1", []Option{call, lockerWide, shared}) }, true},
		"locker: own backend's":      {func() (Settings, error) { return ResolveLocker(Settings{}, "b1", []Option{own}) }, false},
		"call: call option":          {func() (Settings, error) { return Apply(Settings{}, []Option{call}) }, true},
		"call: invalid":              {func() (Settings, error) { return Apply(Settings{}, []Option{bad}) }, false},
	} {
		_, err := tc.resolve()
		if tc.ok && err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: want ErrInvalidOption, got %v", name, err)
		}
	}
	s, err := ResolveBackend("b1", []Option{own, shared})
	if err != nil || BackendValueOr(s, key{}, 0) != 7 || s.Logger != logger {
		t.Errorf("ResolveBackend did not apply its options: %v %v", BackendValueOr(s, key{}, 0), err)
	}
}
