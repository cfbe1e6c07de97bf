package zookeeper

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Defaults.
const (
	// DefaultBasePath is the znode under which locks live.
	DefaultBasePath = "/distlock"
	// ConnectTimeout bounds how long Dial waits for a first session
	// (within its ctx) before failing with ErrUnavailable.
	ConnectTimeout = 5 * time.Second
	// DefaultSessionTimeout is the session timeout Dial asks for.
	DefaultSessionTimeout = 10 * time.Second
)

type (
	sessionTimeoutKey struct{}
	graceKey          struct{}
	basePathKey       struct{}
	eventsKey         struct{}
	connOptionsKey    struct{}
	aclKey            struct{}
	ensembleSizeKey   struct{}
	authKey           struct{}
	allowOpenACLKey   struct{}
)

// Option is an option of this backend, for its New, NewBackend and Open
// with a zk:// URL; it is a distlock.Option, which single calls do not take.
type Option struct{ o driver.Option }

// DriverOption returns the setting.
func (o Option) DriverOption() driver.Option { return o.o }

// WithSessionTimeout sets the session timeout. Dial asks the server for it
// (default 10s); the server clamps it into its own [min, max] range, and
// Dial's loss notice follows the smallest timeout the server granted the
// session. With New, pass the smallest timeout the server granted the
// *zk.Conn's session, at its creation or since (or less): it bounds the
// disconnect grace.
func WithSessionTimeout(d time.Duration) Option {
	if d <= 0 || d > distlock.MaxTTL {
		return Option{driver.InvalidOption("zookeeper: session timeout %v out of range", d)}
	}
	return Option{driver.BackendOption("zookeeper", "WithSessionTimeout", sessionTimeoutKey{}, d)}
}

// WithDisconnectGrace sets how long after a disconnection the session's
// leases are reported lost unless the client is back in the session. Zero
// reports the loss at the first disconnect, as Curator recommends for
// locks. With Dial the default is a quarter of the session timeout T the
// server granted (the smallest it granted the session), and a grace of
// 2T/3 or more is refused: whatever the grace, Dial reports the loss once
// the server has been silent for 2T/3. With New the default is zero, and a
// nonzero grace needs WithSessionTimeout and must be under a third of it,
// less the link's round trip. See "Loss notice before takeover" in
// docs/backends/zookeeper.md for why.
func WithDisconnectGrace(d time.Duration) Option {
	if d < 0 {
		return Option{driver.InvalidOption("zookeeper: disconnect grace %v is negative", d)}
	}
	return Option{driver.BackendOption("zookeeper", "WithDisconnectGrace", graceKey{}, d)}
}

// WithBasePath sets the znode under which locks live (default "/distlock"):
// an absolute path, not the root, without a trailing slash. Missing
// ancestors are created as persistent znodes.
func WithBasePath(p string) Option {
	if err := validBase(p); err != nil {
		return Option{driver.InvalidOption("zookeeper: base path %q: %v", p, err)}
	}
	return Option{driver.BackendOption("zookeeper", "WithBasePath", basePathKey{}, p)}
}

// WithEvents hands New the event channel that zk.Connect returned with the
// *zk.Conn. The Locker then drains it (do not read it elsewhere) and learns
// of disconnections and session expiry, which close lost leases' Done.
func WithEvents(ch <-chan zk.Event) Option {
	if ch == nil {
		return Option{driver.InvalidOption("zookeeper: nil event channel")}
	}
	return Option{driver.BackendOption("zookeeper", "WithEvents", eventsKey{}, ch)}
}

// WithConnOptions passes options such as zk.WithLogger or zk.WithDialer to
// the zk.Connect that Dial makes. By default Dial sends the client's log
// lines to the distlock logger (WithLogger) at debug level. Dial installs
// its own zk.WithEventCallback after these options, replacing any given
// here: to see the events yourself, connect with zk.Connect and use New.
func WithConnOptions(opts ...func(*zk.Conn)) Option {
	for _, o := range opts {
		if o == nil {
			return Option{driver.InvalidOption("zookeeper: nil connection option")}
		}
	}
	return Option{driver.BackendOption("zookeeper", "WithConnOptions", connOptionsKey{}, opts)}
}

// WithACL sets the ACL of the znodes the Locker creates: the base path and
// its missing ancestors, the key directories and the lock znodes. The
// default is zk.WorldACL(zk.PermAll) without WithAuth (any client may
// delete any lock), and with WithAuth the authenticated user's alone:
// zk.DigestACL(zk.PermAll, user, password) for digest auth,
// zk.AuthACL(zk.PermAll) (creator only) for another scheme. With WithAuth,
// an ACL that grants world:anyone or an ip range (ip:0.0.0.0/0 matches
// every client) CREATE, DELETE or ADMIN is refused (ErrOpenACL) unless
// WithAllowOpenACL says otherwise. Its other entries are the Locker's
// identities: a parent znode that grants c, d or a to any other is open
// (see WithAllowOpenACL). With a scheme other than digest, name the
// identity here: the server expands zk.AuthACL to ids the Locker cannot
// know, which its checks then take for another's.
func WithACL(acl []zk.ACL) Option {
	if len(acl) == 0 {
		return Option{driver.InvalidOption("zookeeper: empty ACL")}
	}
	return Option{driver.BackendOption("zookeeper", "WithACL", aclKey{}, acl)}
}

// auth is WithAuth's setting.
type auth struct {
	scheme string
	data   []byte
}

// digest returns the user and password of digest auth.
func (a auth) digest() (user, password string, ok bool) {
	if a.scheme != "digest" {
		return "", "", false
	}
	return strings.Cut(string(a.data), ":")
}

// WithAuth makes Dial authenticate every connection of its session, as
// go-zookeeper's AddAuth and Curator's authorization(scheme, auth) do:
// scheme "digest" with auth "user:password" is ZooKeeper's user and
// password (zk://user:password@host/base in a URL). Dial fails with
// distlock.ErrAccessDenied when the server refuses it. With it, the
// Locker's znodes get the user's ACL (see WithACL), and Dial and each
// acquire check that the base path and the key directory let no one else
// create, delete or re-ACL their children (see WithAllowOpenACL). A
// digest password is never refused by ZooKeeper: a wrong one is another
// identity, which the base path's ACL then refuses (ErrAccessDenied).
// Dial only: with New, authenticate the *zk.Conn yourself.
func WithAuth(scheme string, auth []byte) Option {
	if scheme == "" {
		return Option{driver.InvalidOption("zookeeper: empty auth scheme")}
	}
	if scheme == "digest" {
		user, _, ok := strings.Cut(string(auth), ":")
		if !ok || user == "" {
			return Option{driver.InvalidOption("zookeeper: digest auth needs \"user:password\"")}
		}
	}
	return Option{driver.BackendOption("zookeeper", "WithAuth", authKey{}, authOf(scheme, auth))}
}

// String names the scheme, never the credentials (%v, %s).
func (a auth) String() string { return a.scheme + ":xxxxx" }

// GoString is String for %#v.
func (a auth) GoString() string { return a.String() }

func authOf(scheme string, data []byte) auth {
	return auth{scheme: scheme, data: append([]byte(nil), data...)}
}

// WithAllowOpenACL accepts what a Locker with credentials (WithAuth) or a
// restrictive WithACL otherwise refuses with ErrOpenACL: a base path or key
// directory whose ACL lets another identity than the Locker's create,
// delete or re-ACL its children (world:anyone, an ip range, another digest
// user, an x509 subject), and with WithAuth a WithACL that grants that to
// world:anyone or an ip range. Whoever holds such an identity can then
// delete the Locker's lock znodes, or queue znodes of their own ahead of
// the holder's. URL: allow_open_acl=true.
func WithAllowOpenACL(allow bool) Option {
	return Option{driver.BackendOption("zookeeper", "WithAllowOpenACL", allowOpenACLKey{}, allow)}
}

// WithEnsembleSize declares how many servers the ensemble has, for
// Guarantees().FailuresTolerated ((n−1)/2). Dial counts its server list by
// default; New assumes a standalone server unless told.
func WithEnsembleSize(n int) Option {
	if n < 1 {
		return Option{driver.InvalidOption("zookeeper: ensemble size %d", n)}
	}
	return Option{driver.BackendOption("zookeeper", "WithEnsembleSize", ensembleSizeKey{}, n)}
}

// validBase checks a base path: absolute, not the root, no empty, "." or
// ".." segments, no trailing slash, no control characters.
func validBase(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return errors.New("must be an absolute path below the root")
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("bad segment %q", seg)
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return errors.New("/zookeeper is reserved")
	}
	for _, r := range p {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return errors.New("holds a control or invalid character")
		}
	}
	return nil
}
