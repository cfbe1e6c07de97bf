// Package driver is the contract between distlock's portable layer and a
// lock service: what a backend implements, the options it reads, and how it
// registers a URL scheme. Users of distlock do not need it; backend authors
// do (the backends in this repository are written against it, and
// distlock.New turns any [Backend] into a distlock.Locker).
//
// A backend makes single attempts — take, refresh, release — each usually
// one round trip. It does not validate input, retry, sleep, or run renewal
// goroutines: the portable layer does all of that once for every backend.
// Every capability is a method of [Backend]: a backend embeds
// [Unsupported] for those it lacks, and a wrapper that embeds a Backend
// forwards them all. Its [Guarantees] name the wait mode, which says
// whether the portable layer waits with [Backend.Lock] (WaitQueue),
// [Backend.Subscribe] (WaitNotify) or by polling TryLock.
//
// Types users read (Token, Guarantees, Holder) are package distlock's;
// those here are what backends hand over, converted at the boundary.
// Package driver/urlparam reads what every backend URL has in common
// (parameters, hosts, TLS, credentials) and checks that a server answers.
package driver
