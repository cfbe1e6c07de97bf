// Package distlockotel reports distlock's lock events to OpenTelemetry: an
// adapter of the [distlock.Observer] interface. It lives in its own package
// so that programs which do not import it do not link OpenTelemetry.
//
//	obs, err := distlockotel.New() // global MeterProvider
//	locker, err := distlock.Open(ctx, url, distlock.WithObserver(obs))
//
// # Metrics
//
// Every instrument carries distlock.backend (the backend's short name, e.g.
// "redis"). The lock key is NOT an attribute unless [WithKeyAttribute] asks
// for it: keys are often unbounded (per user, per job run) and each distinct
// value is a new time series.
//
//	distlock.acquire.duration     histogram, s  time Acquire/TryAcquire/Do spent getting (or
//	                                            failing to get) the lock, waits included;
//	                                            attribute distlock.outcome: acquired, busy
//	                                            (TryAcquire found it held), timeout, canceled,
//	                                            closed or error
//	distlock.acquire.contentions  counter       attempts that found the key held by someone
//	                                            else, one per attempt of a waiting Acquire
//	                                            (TryAcquire records busy instead)
//	distlock.refresh.duration     histogram, s  round trip of each successful refresh
//	distlock.refresh.failures     counter       refreshes that failed with the lease still
//	                                            possibly valid (a server error); a refresh
//	                                            that finds the lock gone counts as a loss
//	distlock.lease.lost           counter       leases that ended without Release: expired,
//	                                            taken over, or their backend session ended
//	distlock.lease.duration       histogram, s  how long each lease was held; attribute
//	                                            distlock.outcome: released or lost (a lease
//	                                            ended by Locker.Close counts as released)
//
// # Tracing
//
// A lock event has no begin and end this package could honestly turn into a
// span, so it creates none. It adds span events to the span the caller
// already has in the context — typically the one around the work the lock
// protects — and only when that span is recording:
//
//	distlock.acquired        after Acquire/TryAcquire/Do got the lock (token, duration)
//	distlock.acquire_failed  after they failed (outcome, error)
//	distlock.contended       each attempt of a waiting Acquire that found the key held
//	distlock.refresh_failed  on an explicit Lease.Refresh's span (background renewal has none)
//	distlock.released, distlock.lost
//	                         on the span that was current when the lease was acquired, if it is
//	                         still recording: the Locker reports these without the caller's
//	                         context, so the span is remembered from the acquire
//
// Span events always carry distlock.backend and distlock.key (a span is
// per operation, so the key costs no cardinality there), plus distlock.token
// where there is one and distlock.duration in seconds.
package distlockotel
