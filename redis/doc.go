// Package redis is the single-Redis backend of distlock, on go-redis v9: a
// plain client, a Sentinel failover client and a Cluster client all work
// (anything that is a goredis.UniversalClient). It serves "redis://" and
// "rediss://" URLs for distlock.Open.
//
// # How it works
//
// Acquire is one round trip: a Lua script runs SET lock owner NX PX ttl and,
// only if that succeeded, advances a per-key counter to max(counter + 1,
// the server's TIME in microseconds); the counter is the fencing token. It
// expires an hour past the key's last lock: the clock has passed it by
// then, so tokens keep increasing unless the clock steps back by more. When the key is held the script returns the holder's PTTL
// instead, which bounds the fallback poll of a waiter. Refresh (PEXPIRE) and
// release (DEL, then PUBLISH a release notice) are Lua scripts that first
// compare the stored owner value, a random 128-bit value unique to each
// acquire attempt. Scripts are called with EVALSHA and fall back to EVAL on
// NOSCRIPT (after SCRIPT FLUSH, a restart or a failover).
//
// Any request may land late or twice: go-redis resends a command after a
// read timeout while the first copy may still be on its way. So each
// refresh carries the lease's refresh number, kept until 5 s past its lock,
// and a copy older than the newest applied changes nothing; every release
// leaves a tombstone for 5 s (an attempt given back with no answer, for its
// TTL + 5 s: a slow server may run it late) that refuses a late acquire copy
// of its owner and makes a resent release report what the first copy did;
// and a refused attempt is remembered for 5 s, so its late copy cannot take
// the key once it is free. A copy held up in the network for longer than 5 s may still
// land. A hot key keeps about (releases + refused attempts) per second × 5 s
// short-lived tombstones.
//
// Waiters are woken by the release's PUBLISH, through one shared pub/sub
// connection per Locker, opened at the first wait; a notice that is lost
// only delays a waiter until the holder's TTL runs out (at most 5s between
// polls).
//
// # Key layout
//
// With the default prefix "distlock:", key "orders/42" uses
//
//	distlock:{orders/42}            the lock: owner value, PX expiry
//	distlock:{orders/42}:token      the token counter, until an hour past the last lock
//	distlock:{orders/42}:holder     the holder record (hash: owner, token, value), only with WithValue
//	distlock:{orders/42}:seq        the holder's last refresh number (until 5 s past the lock)
//	distlock:{orders/42}:released   the pub/sub channel of release notices
//
// The braces are a Cluster hash tag: lock, counter and holder record share
// a slot, so one script may touch them all. Inside the tag "%" and "}" are escaped
// ("%25", "%7D"), so distinct keys stay distinct. Set the prefix with
// [WithKeyPrefix]; [distlock.Lease.As] with a *[Keys] gives a lease's key
// names. Short-lived tombstones (distlock:{orders/42}:gone:<owner value>)
// keep a late copy of a released or refused attempt from taking the lock.
// With [WithFairQueue], distlock:{orders/42}:waiters and
// :waiter-deadlines (sorted sets) hold the waiters; they expire with the
// last waiter's deadline.
//
// # Fair queue
//
// By default a release wakes every waiter and they race, with each other
// and with new attempts, so an unlucky waiter can lose many rounds in a row.
// [WithFairQueue] (URL fair=true) keeps waiting Acquires in the order they
// first found the lock held: an attempt of a waiter takes a free lock only
// when no live waiter came before it, and is otherwise queued and told how
// long to wait. A release's notice names the first waiter and wakes only
// it; it has a window (250 ms by default) from the release to take the lock,
// and the waiters behind it look again every window. A place that is not
// first lasts a few seconds past the time its waiter was told to wait (a
// client may come back late); the first waiter's place lapses a window
// after the lock is seen free, so a waiter whose process died holds the
// others up for about one window, and one that gives up (ctx) leaves the
// queue at once. A waiter whose notices fail (it then polls with back-off)
// may miss its window and go to the back. A grant taken from the queue
// sends a notice of its own, so Watch and election observers learn of the
// new holder at once. TryAcquire takes a free lock whoever waits, as the
// fair locks of java.util.concurrent do, and so does a Locker without the
// option: give every Locker of a key the same setting. The queue only
// decides who may take a free lock; mutual exclusion and tokens are as
// without it. It costs a command or two per acquire and release, and a
// notice round trip per hand-off. Guarantees reports FIFO, and Inspect
// counts the queue's live places as Waiters (see Inspection).
//
// # Guarantees
//
// Mutual exclusion holds while the one Redis server keeps its data and its
// clock and the client's run at the same rate: the server expires a lock by
// its wall clock, the lease's deadline runs on the client's monotonic clock
// (less a drift allowance), so a server clock stepped forward, or a client
// host suspended past the TTL, can let a second client in while the first
// still believes it holds the key (Guarantees: ClockDependent). It does
// not survive a failover to a replica that had not received the latest
// writes, nor a restart that loses writes (anything short of appendonly with
// appendfsync always): a held lock can then be lost too.
//
// Fencing tokens strictly increase across those events too, under one
// assumption: the clocks of the servers that serve a key (a master and the
// replicas that may replace it) differ by less than a restart or failover
// takes, and do not step back across it. A restarted server that lost the
// counter, or a promoted replica whose counter lags, seeds the next token
// from its clock in microseconds, which is past every token handed out
// before. So a guarded resource (package fencing) still refuses the writes
// of a holder whose lock was lost that way. [WithWaitReplicas] narrows the
// failover window by running WAIT after each acquire and refresh (WAIT does
// not make Redis strongly consistent). A maxmemory-policy of allkeys-* can
// evict the token counter; the next token then still comes from the clock,
// but the backend checks the policy when it starts and warns, or refuses
// with [WithEvictionCheck]. volatile-* policies can evict held locks early.
// Locks are not FIFO unless [WithFairQueue] is set: any waiter may win
// after a release.
//
// # Inspection
//
// Locker.Inspect reads a key in one round trip: a script that writes
// nothing runs on the server that owns the key (the master; on a Cluster
// the master of the key's slot) and returns the lock's owner and PTTL, the
// counter and the holder record. Held is whether the lock key exists; TTL
// is its PTTL as the server counts it (whole milliseconds, at least 1ms
// while held); Waiters is -1, as waiters are not queued on the server,
// unless WithFairQueue queues them: then it counts the places that have
// not lapsed, read in the same script (a waiting Acquire, or for up to
// its place's deadline one that went away without leaving: a crashed
// process; one that gives up leaves at once).
// Token is the holder's: while a lock exists its counter is its token (the
// acquire script sets the lock and advances the counter together, a resent
// copy of the same attempt only reads the counter back, and nothing else
// advances it while the lock exists). Value comes from the holder record,
// which the acquire script writes with the lock only when WithValue gave a
// value, every refresh of that lease extends with the lock, the release
// deletes, and which otherwise expires with the lock. It counts only while
// its owner field is the lock's owner value, unique to each attempt, so
// the value of an earlier holder whose lock expired or was deleted is
// never reported for a later one. Without a value, acquire and refresh do
// nothing more than before; a release deletes one more (missing) key.
//
// Inspect reads the master at one moment: a later failover to a replica
// that missed the latest writes can change the answer, as it can lose the
// lock itself, and a counter evicted under maxmemory-policy allkeys-*
// makes Inspect of a lock without a value fail. There is no server-side
// watch (driver.Watcher): Redis pushes key changes only as keyspace
// notifications, which need server configuration (notify-keyspace-events)
// this library does not assume. Locker.Watch therefore wakes on the release
// notices waiters use and polls for grants and expiries (an expiry is
// polled for when the TTL Inspect reported runs out), backing off up to the
// Locker's WithBackoff cap while nothing changes.
//
// # Shared with Redlock
//
// The scripts, the key layout and the release notifier are shared with
// package redlock, which runs them on each of its nodes, so a Redlock and
// a single-Redis Locker with the same prefix use the same keys. They live
// in an internal package: this package exports only its user API, and
// [Keys] is an alias of the layout type they share, so that Lease.As fills
// in a redis.Keys for a lease of either backend.
//
// Clients should set ContextTimeoutEnabled so that context deadlines bound
// socket reads and writes; URLs opened with distlock.Open do.
//
// # TLS, ACL users, Sentinel
//
//	rediss://app@redis:6380/0?ca_file=/ca.pem&cert_file=/c.pem&key_file=/c-key.pem&password_file=/run/secrets/redis
//	redis://app@sentinel-1:26379/0?master_name=mymaster&addr=sentinel-2:26379&tls=true&password_file=…
//
// rediss:// or tls=true turns TLS on (distlock.WithTLSConfig too); ca_file,
// cert_file, key_file and server_name set it up; user:password@ or
// password_file log in (to the master, with master_name: go-redis's
// Sentinel URL, whose host and addr parameters are the Sentinels). The
// least privileges of the lock user, with the default prefix:
//
//	ACL SETUSER app on >PASSWORD resetkeys ~distlock:* resetchannels &distlock:* -@all +ping +evalsha +eval +subscribe +unsubscribe +publish +time +get +set +del +exists +incr +pexpire +pexpireat +pttl +hget +hset +hmget +zadd +zcount +zrange +zrangebyscore +zrem +zscore
//
// (open with eviction=ignore: the policy check needs CONFIG GET). A wrong
// password, a refused certificate or a NOPERM is distlock.ErrAccessDenied,
// never retried; a refused PUBLISH does not fail a release, and a refused
// SUBSCRIBE makes waiters poll (logged once). Anyone who may write the
// keys under the prefix can delete locks and roll tokens back: see
// docs/security-redis.md for what the key pattern protects.
//
// # Logging
//
// The backend logs only to the logger given with distlock.WithLogger.
// go-redis has one logger for the whole process (goredis.SetLogger), on
// stderr by default: while a Locker from distlock.Open is open, distlock
// installs a logger there that sends go-redis's lines to the WithLogger
// loggers of such Lockers, or drops them if none has one. A client passed
// to New is the caller's, and go-redis's logger is left alone.
package redis
