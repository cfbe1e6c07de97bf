package faults

import "fmt"

// fenceKey is where a fence stands in the order the guard accepts fences
// in: by epoch first — the operator raises it when the key space moves to
// another backend or cluster, whose tokens do not compare with the old
// ones — then by token. At one (epoch, token) the holder decides: the
// guard takes it again only from the holder that wrote it.
type fenceKey struct{ epoch, token int64 }

// fenceOf is the fence an acquire or write event carries.
func fenceOf(e Event) fenceKey { return fenceKey{e.Epoch, e.Token} }

// less reports whether k is below o: a smaller epoch whatever the tokens,
// or a smaller token in the same epoch.
func (k fenceKey) less(o fenceKey) bool {
	if k.epoch != o.epoch {
		return k.epoch < o.epoch
	}
	return k.token < o.token
}

// String is the token, with its epoch once one was raised.
func (k fenceKey) String() string {
	if k.epoch == 0 {
		return fmt.Sprintf("tok %d", k.token)
	}
	return fmt.Sprintf("epoch %d tok %d", k.epoch, k.token)
}
