package redisnode

import "testing"

func TestKeysForLayout(t *testing.T) {
	for _, tc := range []struct{ prefix, key, base string }{
		{"distlock:", "k", "distlock:{k}"},
		{"", "", "{}"},
		{"p:", "a}b%c", "p:{a%7Db%25c}"},
		{"x:", "ключ", "x:{ключ}"},
	} {
		want := Keys{Lock: tc.base, Counter: tc.base + ":token", Channel: tc.base + ":released",
			Gone: tc.base + ":gone", Retake: tc.base + ":retake", Holder: tc.base + ":holder", Seq: tc.base + ":seq"}
		if got := KeysFor(tc.prefix, tc.key); got != want {
			t.Errorf("KeysFor(%q, %q) = %+v, want %+v", tc.prefix, tc.key, got, want)
		}
	}
}

func BenchmarkKeysFor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = KeysFor("distlock:", "some/key")
	}
}
