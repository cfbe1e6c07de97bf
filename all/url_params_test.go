package all_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver/urlparam"
)

// A URL's unknown or malformed parameter gets one error shape on every
// backend, before anything is dialled (port 1 refuses, so a dial would be
// ErrUnavailable instead).
func TestURLParamErrorsAreOneShape(t *testing.T) {
	type row struct {
		query string
		want  string // the message after "distlock: invalid URL: "
	}
	// Every scheme: the portable parameters' errors.
	portable := []row{
		{"renew_intervall=1s", `unknown parameter "renew_intervall" (did you mean "renew_interval"?); valid: `},
		{"zzzzzz=1", `unknown parameter "zzzzzz"; valid: `},
		{"ttl=abc", `parameter ttl="abc": not a duration (e.g. 30s)`},
		{"autorenew=maybe", `parameter autorenew="maybe": not a boolean (true or false)`},
		{"ttl=1s&ttl=2s", `parameter ttl given 2 times (give it once)`},
		{"fence_epoch=x", `parameter fence_epoch="x": not a 64-bit integer`},
	}
	schemes := []struct {
		base string
		own  []row // the backend's own parameters' errors
	}{
		{"mem://", []row{
			{"tll=3s", `unknown parameter "tll" (did you mean "ttl"?); valid: `},
		}},
		{"redis://127.0.0.1:1", []row{
			{"tll=3s", `unknown parameter "tll" (did you mean "tls" or "ttl"?); valid: `},
			{"prefx=a", `unknown parameter "prefx" (did you mean "prefix"?); valid: `},
			{"dial_timout=1s", `unknown parameter "dial_timout" (did you mean "dial_timeout"?); valid: `},
			{"wait_timeout=soon", `parameter wait_timeout="soon": not a duration (e.g. 30s)`},
			{"fair=maybe", `parameter fair="maybe": not a boolean (true or false)`},
			{"prefix=a&prefix=b", `parameter prefix given 2 times (give it once)`},
			{"eviction=never", `parameter eviction="never": not warn, refuse or ignore`},
		}},
		{"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", []row{
			{"node_timout=1s", `unknown parameter "node_timout" (did you mean "node_timeout"?); valid: `},
			{"node_timeout=soon", `parameter node_timeout="soon": not a duration (e.g. 30s)`},
			{"dial_timeout=0s", `parameter dial_timeout="0s": not a positive duration (e.g. 30s)`},
			{"tls=maybe", `parameter tls="maybe": not a boolean (true or false)`},
		}},
		{"etcd://127.0.0.1:1/", []row{
			{"loss_wach=true", `unknown parameter "loss_wach" (did you mean "loss_watch"?); valid: `},
			{"dial_timeout=soon", `parameter dial_timeout="soon": not a positive duration (e.g. 30s)`},
			{"loss_watch=maybe", `parameter loss_watch="maybe": not a boolean (true or false)`},
			{"prefix=a&prefix=b", `parameter prefix given 2 times (give it once)`},
		}},
		{"zk://127.0.0.1:1/locks", []row{
			{"sesion_timeout=1s", `unknown parameter "sesion_timeout" (did you mean "session_timeout"?); valid: `},
			{"session_timeout=soon", `parameter session_timeout="soon": not a duration (e.g. 30s)`},
			{"allow_open_acl=maybe", `parameter allow_open_acl="maybe": not a boolean (true or false)`},
		}},
		{"postgres://app@127.0.0.1:1/db", []row{
			{"tabel=x", `unknown parameter "tabel" (did you mean "table"?); valid: `},
			{"sslmod=disable", `unknown parameter "sslmod" (did you mean "sslmode"?); valid: `},
			{"notify=maybe", `parameter notify="maybe": not a boolean (true or false)`},
			{"table=a&table=b", `parameter table given 2 times (give it once)`},
		}},
	}
	for _, s := range schemes {
		for _, r := range append(slices.Clone(portable), s.own...) {
			raw := s.base + "?" + r.query
			start := time.Now()
			_, err := distlock.Open(t.Context(), raw)
			if !errors.Is(err, distlock.ErrInvalidURL) || errors.Is(err, distlock.ErrUnavailable) {
				t.Errorf("Open(%q): want ErrInvalidURL before any dial, got %v", raw, err)
				continue
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("Open(%q) took %v: it dialled", raw, took)
			}
			msg := strings.TrimPrefix(err.Error(), distlock.ErrInvalidURL.Error()+": ")
			if !strings.HasPrefix(msg, r.want) {
				t.Errorf("Open(%q):\n got %s\nwant %s…", raw, msg, r.want)
				continue
			}
			if strings.HasSuffix(r.want, "valid: ") {
				checkValid(t, raw, strings.TrimPrefix(msg, r.want))
			}
		}
	}
}

// checkValid checks an unknown-parameter error's valid list: sorted,
// with the portable parameters.
func checkValid(t *testing.T, raw, list string) {
	t.Helper()
	valid := strings.Split(list, ", ")
	if !slices.IsSorted(valid) {
		t.Errorf("Open(%q): valid list not sorted: %s", raw, list)
	}
	for _, p := range urlparam.Portable {
		if !slices.Contains(valid, p) {
			t.Errorf("Open(%q): valid list lacks %s: %s", raw, p, list)
		}
	}
}

// The valid list of mem:// is the portable parameters, and each of those
// is read by Open (a bad value is reported as bad, not as unknown).
func TestURLParamPortableAreRead(t *testing.T) {
	_, err := distlock.Open(t.Context(), "mem://?bogus=1")
	want := `distlock: invalid URL: unknown parameter "bogus"; valid: autorenew, fence_epoch, renew_interval, ttl`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	for _, p := range urlparam.Portable {
		_, err := distlock.Open(t.Context(), "mem://?"+p+"=%21bad")
		if err == nil || !strings.Contains(err.Error(), "parameter "+p+`="!bad": not a`) {
			t.Errorf("%s=!bad: got %v", p, err)
		}
	}
}
