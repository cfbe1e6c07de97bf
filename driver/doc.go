// Package driver is the contract between distlock's portable layer and a
// lock service: what a backend implements, the options it reads, and how it
// registers a URL scheme. Users of distlock do not need it; backend authors
// do (the backends in this repository are written against it, and
// distlock.New turns any [Backend] into a distlock.Locker).
//
// A backend makes single attempts — take, refresh, release — each usually
// one round trip. It does not validate input, retry, sleep, or run renewal
// goroutines: the portable layer does all of that once for every backend.
// What a backend can do beyond that is declared, not discovered: its
// [Guarantees] name the wait mode ([WaitQueue] backends implement
// [Backend.Lock], [WaitNotify] backends [Backend.Subscribe]), so a wrapper
// that embeds a Backend keeps every capability.
//
// Types shared with users (Token, Guarantees, the sentinel errors) are
// defined here and aliased by package distlock. Package driver/urlparam
// reads what every backend URL has in common (parameters, hosts, TLS,
// credentials).
package driver
