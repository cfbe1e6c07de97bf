package conformance

import "time"

// long is a TTL no case waits out: a key held with it is freed only by a
// release, a crash or a forced expiry.
const long = 30 * time.Second

// cases is the suite in the order it runs. The checks live beside the rules
// they share: cases_exclusion.go, cases_release.go (release and refresh),
// cases_expiry.go, cases_tokens.go, cases_wait.go, cases_input.go,
// cases_do.go and cases_close.go (Close and Guarantees).
var cases = []Case{
	{"MutualExclusion", "at most one holder of a key at any time, under contention from several Lockers, and each holder's token is larger than the previous holder's", mutualExclusion},
	{"TryAcquireFree", "TryAcquire on a free key returns a lease with the key, a positive token, an open Done and a future Expires", tryAcquireFree},
	{"TryAcquireHeld", "TryAcquire on a held key fails at once with ErrNotAcquired, from another Locker and from the holder's own (locks are not reentrant)", tryAcquireHeld},
	{"ReleaseFreesKey", "after Release, Done is closed, Err is ErrReleased, and another Locker can take the key at once", releaseFreesKey},
	{"ReleaseTwice", "a second Release of the same lease returns ErrNotHeld", releaseTwice},
	{"RefreshAfterRelease", "Refresh of a released lease returns ErrNotHeld", refreshAfterRelease},
	{"StaleReleaseKeepsNewHolder", "a release by a holder whose lock ended on the server returns ErrNotHeld and leaves the new holder's lock in place", staleRelease},
	{"StaleRefreshFails", "a refresh by a holder whose lock ended on the server returns ErrNotHeld and does not take the lock back", staleRefresh},
	{"RefreshExtends", "Refresh moves Expires forward and keeps the key held past the original TTL", refreshExtends},
	{"RefreshInvalidTTL", "Refresh with a zero or negative TTL returns ErrInvalidTTL and leaves the lease held", refreshInvalidTTL},
	{"ExpiresIsConservative", "Expires is after the acquire began and before its end plus the TTL (drift is subtracted, never added)", expiresConservative},
	{"ExpiryEndsLease", "a lease that is not refreshed ends within its TTL with ErrLeaseLost, and the key can then be taken", expiryEndsLease},
	{"AutoRenewOutlivesTTL", "a lease with WithAutoRenew stays held, with the same token, long past its TTL", autoRenew},
	{"CrashFreesAfterTTL", "a crashed holder's lock stays held (the server does not free it early) and is free again after the TTL", crashFreesAfterTTL},
	{"TokensIncreaseAfterCrash", "the holder after a crashed one gets a larger token", tokensAfterCrash},
	{"ForcedExpiryEndsDone", "when the server drops a renewing lease's lock, Done closes within the TTL plus a renewal and Err matches ErrLeaseLost", forcedExpiry},
	{"TokensIncrease", "successive holders of a key, across Lockers, get strictly increasing tokens", tokensIncrease},
	{"TokensIncreaseAfterExpiry", "the holder after a lock ended on the server gets a larger token", tokensAfterExpiry},
	{"WaiterWakesOnRelease", "a waiting Acquire takes the key soon after the holder releases, long before the holder's TTL", waiterWakes},
	{"FIFOHandOff", "on backends that claim FIFO, callers that began waiting one after another take the released key in that order, and the former holder asking again at once queues behind them", fifoHandOff},
	{"CancelWaitReturnsBoth", "an Acquire cut short by its context returns promptly an error matching both ErrNotAcquired and ctx.Err()", cancelWait},
	{"CancelLeavesNoResidue", "a cancelled waiter leaves nothing behind: once the holder releases, the key can be taken at once", cancelNoResidue},
	{"KeyIsolation", "holding one key neither blocks nor releases another", keyIsolation},
	{"InvalidKey", "empty, oversized, non-UTF-8 and control-character keys give ErrInvalidKey (and ErrInvalid), never a panic or a hang", invalidKey},
	{"InvalidTTL", "zero, negative and over-long TTLs give ErrInvalidTTL (and ErrInvalid)", invalidTTL},
	{"DoNilFunc", "Do with a nil function returns ErrInvalid without taking the lock", doNilFunc},
	{"DoRunsAndReleases", "Do runs fn while holding the key, returns fn's error, and releases afterwards", doRunsAndReleases},
	{"DoRenews", "Do keeps the lease renewed while fn runs longer than the TTL", doRenews},
	{"DoCancelsOnLoss", "when the lease is lost during Do, fn's context is cancelled and Do returns ErrLeaseLost", doCancelsOnLoss},
	{"DoReleasesOnPanic", "a panic in fn still releases the lock, and the panic reaches Do's caller", doReleasesOnPanic},
	{"CloseEndsLeases", "Close releases held locks, closes their Done with ErrClosed, makes later calls return ErrClosed, and is idempotent", closeEndsLeases},
	{"CloseWakesWaiters", "Close wakes a waiting Acquire, which returns ErrClosed", closeWakesWaiters},
	{"InspectFree", "Inspect reports a key never taken, and a released one, as free: no token, value or TTL, and Waiters 0 on backends that queue waiters (WaitQueue or FIFO), -1 elsewhere", inspectFree},
	{"InspectHolder", "Inspect, from any Locker, reports the holder's token, its WithValue value (or none) and a TTL within the lease's (0 only on session-bound backends)", inspectHolder},
	{"InspectNewHolder", "Inspect reports each new holder's own token and value, never a previous holder's", inspectNewHolder},
	{"InspectAfterCrash", "Inspect reports a crashed holder until its lock ends, then its successor without the crashed holder's value", inspectAfterCrash},
	{"InspectValueBounds", "a value of MaxValueLen arbitrary bytes round-trips, one byte more is ErrInvalidOption and takes nothing, and Inspect and Watch refuse invalid keys", inspectValueBounds},
	{"InspectWaiters", "on backends that queue waiters (WaitQueue or FIFO) Inspect counts the callers waiting behind the holder as they come and go", inspectWaiters},
	{"WatchSeesChanges", "Watch reports the current state, then each grant (with its token and value), release and end on the server, and closes when its context ends or its Locker closes", watchSeesChanges},
	{"WatchTokensIncrease", "Watch reports each holder once, and never a holder whose token is not larger than one it reported before, across releases, hand-overs to waiters and ends on the server", watchTokensIncrease},
	{"ElectionOneLeader", "at most one leader of a role at any time under contention, each term's token larger than the last, and Leader reports the current term", electionOneLeader},
	{"ElectionObserversSeeEveryLeader", "an observer sees every leader, in order, with its value; a late observer starts from the current leader; vacancies are not reported", electionObserversSeeEveryLeader},
	{"ElectionResignHandsOver", "a waiting candidate is elected soon after the leader resigns, long before the TTL, with a larger token", electionResignHandsOver},
	{"ElectionPausedLeaderReplaced", "a leader that stops renewing is replaced after its TTL, its Done has closed with ErrLeaseLost by then, and observers see the new leader", electionPausedLeaderReplaced},
	{"Guarantees", "Guarantees names the backend and a valid wait mode", guarantees},
}
