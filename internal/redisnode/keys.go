package redisnode

import "strings"

// Keys names the Redis keys of one lock. All of them share the hash tag
// "{key}", so they live in one Cluster slot and one script may touch them.
//
// Users reach it as redis.Keys (an alias), the target of Lease.As on a
// lease of the redis or redlock backend: Lock, Counter, Holder and Channel
// are the ones worth reading; Gone and Retake name short-lived keys of the
// scripts.
type Keys struct {
	Lock    string // the lock: owner value, with a PX expiry
	Counter string // the fencing-token counter: advanced per grant, expiring CounterLinger after its last lock
	Channel string // pub/sub channel of release notices (not a key)
	Gone    string // prefix of the tombstones of recent releases and refusals, one per owner (see GoneFor)
	Retake  string // Redlock: the nonce of the refresh that last took the lock back
	Seq     string // the holding lease's last refresh, "<seq>:<owner>", kept TTL + MaxLate
	// Holder is the holder record: a hash of the lock's owner, its token
	// and its value (WithValue), expiring with the lock. Readers trust it
	// only while its owner field equals the lock's value.
	Holder string
}

// Queue names the keys of the lock's fair queue (the redis backend's
// WithFairQueue): the waiters in the order they came, and their deadlines.
func (k Keys) Queue() (waiters, deadlines string) {
	return k.Lock + ":waiters", k.Lock + ":waiter-deadlines"
}

// WaiterChannel names the channel of one waiter of the fair queue: the
// notice that its turn has come goes there, not to every waiter.
func (k Keys) WaiterChannel(waiter string) string { return k.Channel + ":" + waiter }

// GoneFor names owner's tombstone: it exists, for MaxLate, once a
// release of owner ran or an attempt of owner was refused, so that a late
// copy of its acquire (or, after a release, of its retake) is refused.
func (k Keys) GoneFor(owner string) string { return k.Gone + ":" + owner }

// KeysFor returns the layout of key under prefix:
//
//	<prefix>{<key>}            lock
//	<prefix>{<key>}:token      token counter (CounterLinger past its last lock)
//	<prefix>{<key>}:released   release channel
//	<prefix>{<key>}:released:<w>  fair queue: waiter w's turn has come (channel)
//	<prefix>{<key>}:gone:<o>   tombstone of owner o's release (short-lived)
//	<prefix>{<key>}:retake     Redlock's retake marker (short-lived)
//	<prefix>{<key>}:holder     holder record: owner, token, value (expires with the lock)
//	<prefix>{<key>}:seq        the holder's last refresh (TTL + 5 s)
//	<prefix>{<key>}:waiters    fair queue: waiters by arrival (WithFairQueue; expires with the last)
//	<prefix>{<key>}:waiter-deadlines  fair queue: each waiter's deadline
//
// In the tag, "%" becomes "%25" and "}" becomes "%7D", so a key cannot end
// the hash tag early (or leave it empty) and distinct keys stay distinct.
// The prefix must not contain braces (the backends' WithKeyPrefix enforce
// it).
func KeysFor(prefix, key string) Keys {
	// One string holds every name; each field is a slice of it (every call
	// makes a Keys, so one allocation instead of six).
	tag := escapeTag(key)
	n := len(prefix) + len(tag) + 2
	var b strings.Builder
	b.Grow(6*n + len(keySuffixes))
	for _, suffix := range []string{":token", ":released", ":gone", ":retake", ":holder", ":seq"} {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteByte('}')
		b.WriteString(suffix)
	}
	s := b.String()
	counterEnd := n + len(":token")
	channelEnd := counterEnd + n + len(":released")
	goneEnd := channelEnd + n + len(":gone")
	retakeEnd := goneEnd + n + len(":retake")
	holderEnd := retakeEnd + n + len(":holder")
	return Keys{
		Lock:    s[:n],
		Counter: s[:counterEnd],
		Channel: s[counterEnd:channelEnd],
		Gone:    s[channelEnd:goneEnd],
		Retake:  s[goneEnd:retakeEnd],
		Holder:  s[retakeEnd:holderEnd],
		Seq:     s[holderEnd:],
	}
}

const keySuffixes = ":token:released:gone:retake:holder:seq"

func escapeTag(key string) string {
	if !strings.ContainsAny(key, "%}") {
		return key
	}
	return strings.NewReplacer("%", "%25", "}", "%7D").Replace(key)
}
