package urlparam

import (
	"errors"
	"net/url"
	"testing"

	"github.com/distlock/distlock/driver"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"ttl", "ttl", 0}, {"tll", "ttl", 1}, {"tlt", "ttl", 1},
		{"", "abc", 3}, {"prefx", "prefix", 1}, {"zzz", "ttl", 3}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	valid := []string{"db", "prefix", "tls", "ttl"}
	for _, c := range []struct{ n, want string }{
		{"prefx", `"prefix"`},
		{"tll", `"tls" or "ttl"`},
		{"ttll", `"ttl"`},
		{"zzzzzz", ""},
		{"x", ""},   // one letter: any one-letter edit is no hint
		{"abc", ""}, // two edits from db: too many for three letters
		{"dc", `"db"`},
	} {
		if got := nearest(c.n, valid); got != c.want {
			t.Errorf("nearest(%q) = %s, want %s", c.n, got, c.want)
		}
	}
}

// Done lists what the getters and Pass asked for, present or not, with
// the portable names.
func TestDoneNamesTheValidSet(t *testing.T) {
	u, _ := url.Parse("x://h?prefx=a&other=1&dial_timeout=1s&zzzzzz=2")
	q := NewQuery(u)
	q.String("prefix")
	q.Bool("fair")
	if got := q.Pass("dial_timeout", "pool_size"); got.Get("dial_timeout") != "1s" || len(got) != 1 {
		t.Fatalf("Pass = %v", got)
	}
	err := q.Done()
	want := `distlock: invalid URL: unknown parameters "other", "prefx" (did you mean "prefix"?), "zzzzzz"; ` +
		`valid: autorenew, dial_timeout, fair, fence_epoch, pool_size, prefix, renew_interval, ttl`
	if !errors.Is(err, driver.ErrInvalidURL) || err.Error() != want {
		t.Fatalf("Done:\n got %v\nwant %s", err, want)
	}
}

func TestMalformedValues(t *testing.T) {
	u, _ := url.Parse("x://h?d=soon&b=maybe&i=1.5&j=x&t=-1s&r=1&r=2")
	for _, c := range []struct {
		read func(*Query)
		want string
	}{
		{func(q *Query) { q.Duration("d") }, `parameter d="soon": not a duration (e.g. 30s)`},
		{func(q *Query) { q.Bool("b") }, `parameter b="maybe": not a boolean (true or false)`},
		{func(q *Query) { q.Int("i") }, `parameter i="1.5": not an integer`},
		{func(q *Query) { q.Int64("j") }, `parameter j="x": not a 64-bit integer`},
		{func(q *Query) { q.Timeout("t", 1) }, `parameter t="-1s": not a positive duration (e.g. 30s)`},
		{func(q *Query) { q.String("r") }, `parameter r given 2 times (give it once)`},
	} {
		q := NewQuery(u)
		c.read(q)
		err := q.Err()
		if !errors.Is(err, driver.ErrInvalidURL) || err.Error() != "distlock: invalid URL: "+c.want {
			t.Errorf("got %v, want %s", err, c.want)
		}
	}
}

func TestDoneWithEverythingRead(t *testing.T) {
	u, _ := url.Parse("x://h?a=1")
	q := NewQuery(u)
	if _, ok := q.Int("a"); !ok {
		t.Fatal("a not read")
	}
	if err := q.Done(); err != nil {
		t.Fatal(err)
	}
}
