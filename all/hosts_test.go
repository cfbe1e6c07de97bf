package all_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver/urlparam"
)

// A bare IPv6 literal takes the default port: want [::1]:2379.
func TestHostsIPv6DefaultPort(t *testing.T) {
	u, perr := url.Parse("etcd://[::1]")
	if perr != nil {
		t.Fatal(perr)
	}
	hs, err := urlparam.Hosts(u, "2379")
	if err != nil || hs[0] != "[::1]:2379" {
		t.Errorf("Hosts(%q) = %q, %v; want [::1]:2379 first", u, hs, err)
	}
}

// redis:// takes one host; a list is an invalid URL, not a dial of a
// garbled address.
func TestRedisHostList(t *testing.T) {
	for _, raw := range []string{"redis://127.0.0.1:1,,127.0.0.1:2", "redis://,"} {
		_, err := distlock.Open(context.Background(), raw)
		if !errors.Is(err, distlock.ErrInvalidURL) {
			t.Errorf("%s: %v", raw, err)
		}
	}
}
