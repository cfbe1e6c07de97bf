package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Who may delete a lock: ZooKeeper checks a delete against the ACL of the
// parent, not of the znode deleted. So a lock znode is only as safe as its
// key directory, which must let no one else delete (or create) children,
// nor change its ACL; and a key directory can be planted with an open ACL
// by anyone allowed to create children in the base path. The base path is
// checked at Dial, and each key directory at each acquire (its ACL is read
// in the same round trip as the queue).

// ErrOpenACL is the error of a Locker whose own ACL is not open (WithAuth,
// or a restrictive WithACL) when the base path or a key directory lets
// another identity than the Locker's (world:anyone, an ip range, another
// digest user, an x509 subject) create, delete or re-ACL its children: it
// could then delete or jump its locks. It is also Dial's error when an
// ACL of WithACL grants that to world or an ip range along WithAuth.
// WithAllowOpenACL accepts both. It matches distlock.ErrInvalidOption.
var ErrOpenACL = fmt.Errorf("%w: zookeeper: a parent znode is open to others", distlock.ErrInvalidOption)

// openPerms are the permissions on a parent znode that let a client other
// than the holder end or jump the holder's lock: DELETE (its lock znode),
// CREATE (a lock znode of its own, named to sort first, or a key
// directory with an open ACL) and ADMIN (an open ACL set in place).
const openPerms = zk.PermCreate | zk.PermDelete | zk.PermAdmin

// ownOpenEntry returns the entry of the Locker's own ACL that grants one
// of openPerms to whoever reaches the server: world:anyone, or an ip
// entry (ip:0.0.0.0/0 matches every client, a narrower one every process
// on those hosts). Its other entries (digest, x509, ...) are its
// identities.
func ownOpenEntry(acl []zk.ACL) (zk.ACL, bool) {
	for _, a := range acl {
		if (a.Scheme == "world" || a.Scheme == "ip") && a.Perms&openPerms != 0 {
			return a, true
		}
	}
	return zk.ACL{}, false
}

// own reports whether entry a names one of the Locker's identities: an
// entry of its own ACL (other than world or ip), or its digest user. A
// client without ADMIN on a znode reads each digest as "user:x", which
// then matches the Locker's digest user of that name.
func (b *backend) own(a zk.ACL) bool {
	if a.Scheme == "world" || a.Scheme == "ip" {
		return false
	}
	maskedUser, masked := strings.CutSuffix(a.ID, ":x")
	for _, m := range b.ids {
		if m.Scheme != a.Scheme {
			continue
		}
		if m.ID == a.ID {
			return true
		}
		if user, _, _ := strings.Cut(m.ID, ":"); a.Scheme == "digest" && masked && user == maskedUser {
			return true
		}
	}
	return false
}

// identities returns the entries own matches against: the Locker's ACL
// and its digest user, computed once (a digest is a SHA-1).
func identities(acl []zk.ACL, a auth) []zk.ACL {
	ids := append([]zk.ACL(nil), acl...)
	if user, password, ok := a.digest(); ok {
		ids = append(ids, zk.DigestACL(zk.PermAll, user, password)...)
	}
	return ids
}

// openEntry returns the entry of a parent's acl that grants one of
// openPerms to an identity not the Locker's: world, ip, another digest
// user, an x509 subject (a certificate's subject is public).
func (b *backend) openEntry(acl []zk.ACL) (zk.ACL, bool) {
	for _, a := range acl {
		if a.Perms&openPerms != 0 && !b.own(a) {
			return a, true
		}
	}
	return zk.ACL{}, false
}

// permNames spells perms as ZooKeeper's CLI does (cdrwa).
func permNames(perms int32) string {
	var sb strings.Builder
	for _, p := range []struct {
		bit  int32
		name byte
	}{{zk.PermCreate, 'c'}, {zk.PermDelete, 'd'}, {zk.PermRead, 'r'}, {zk.PermWrite, 'w'}, {zk.PermAdmin, 'a'}} {
		if perms&p.bit != 0 {
			sb.WriteByte(p.name)
		}
	}
	return sb.String()
}

// entryName names an ACL entry in an error: a digest entry by its user
// alone (the rest is a password's hash).
func entryName(a zk.ACL) string {
	if a.Scheme == "digest" {
		user, _, _ := strings.Cut(a.ID, ":")
		return "digest user " + user
	}
	return a.Scheme + ":" + a.ID
}

// errOpenParent reports a parent whose ACL leaves its children to another
// identity than the Locker's.
func errOpenParent(path, what string, open zk.ACL) error {
	return fmt.Errorf("%w: the %s %s grants %s %q, which is not the Locker's identity: it could delete or jump the locks under it; give it a creator-only ACL (zkCli: addauth digest <user>:<password>, then setAcl %s auth::cdrwa), or accept it with allow_open_acl=true (WithAllowOpenACL)",
		ErrOpenACL, what, path, entryName(open), permNames(open.Perms), path)
}

// checkBase runs at Dial with credentials: it creates the base path (and
// its missing ancestors) with the Locker's ACL, or checks the ACL of the
// one that exists. A wrong digest password shows here: the server never
// refuses a digest, it makes another identity of it, which a creator-only
// base path refuses (ErrAccessDenied).
func (b *backend) checkBase(ctx context.Context, conn *zk.Conn) error {
	if err := b.ensureBase(ctx, conn); err != nil {
		return err
	}
	acl, err := call(b, ctx, func() ([]zk.ACL, error) {
		acl, _, err := conn.GetACL(b.base)
		return acl, err
	})
	if errors.Is(err, zk.ErrNoAuth) {
		// The server takes any password as an identity: a wrong one here,
		// or a wrong one at the Locker that created the base path.
		return b.classify(fmt.Errorf("zookeeper: read the ACL of the base path %s: %w (a wrong password, a user it does not admit, or it was created with another password: then have an operator re-create or re-ACL it)", b.base, err))
	}
	if err != nil {
		return b.classify(fmt.Errorf("zookeeper: read the ACL of the base path %s: %w", b.base, err))
	}
	if open, ok := b.openEntry(acl); ok && b.checkACL {
		return errOpenParent(b.base, "base path", open)
	}
	return b.grantsUser(acl)
}

// grantsUser fails, as ErrAccessDenied, when no entry of acl that grants
// create is the Locker's identity: most likely a wrong password. An entry
// of another identity (world, ip, ...) reaches here only when open
// parents are accepted (allow_open_acl); the server judges it.
func (b *backend) grantsUser(acl []zk.ACL) error {
	user, _, ok := b.auth.digest()
	if !ok || user == "super" {
		return nil
	}
	for _, a := range acl {
		if a.Perms&zk.PermCreate != 0 && (b.own(a) || b.allowOpen) {
			return nil
		}
	}
	return driver.AccessDenied(b.addr, fmt.Errorf("zookeeper: the base path %s does not let digest user %s create key directories (a wrong password authenticates as another identity)", b.base, user))
}

// ensureBase creates the base path and its missing ancestors, persistent,
// with the Locker's ACL. It looks before it creates: a create is checked
// against the parent's ACL before the server finds the znode exists, so
// creating an existing base under a parent the user may not write would be
// refused.
func (b *backend) ensureBase(ctx context.Context, conn *zk.Conn) error {
	exists := func(p string) (bool, error) {
		return call(b, ctx, func() (bool, error) {
			ok, _, err := conn.Exists(p)
			return ok, err
		})
	}
	if ok, err := exists(b.base); err != nil || ok {
		return err
	}
	p := ""
	for _, seg := range strings.Split(b.base[1:], "/") {
		p += "/" + seg
		if ok, err := exists(p); err != nil {
			return err
		} else if ok {
			continue
		}
		_, err := call(b, ctx, func() (string, error) { return conn.Create(p, nil, zk.FlagPersistent, b.acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return b.classify(fmt.Errorf("zookeeper: create base path %s: %w", p, err))
		}
	}
	return nil
}

// checkDir checks the ACL of a key directory, read with the queue (look).
func (b *backend) checkDir(dir string, acl []zk.ACL, err error) error {
	if err != nil {
		return fmt.Errorf("zookeeper: read the ACL of %s: %w", dir, err)
	}
	if open, ok := b.openEntry(acl); ok {
		return errOpenParent(dir, "key directory", open)
	}
	return nil
}

// classify makes an error match the sentinel the portable layer acts on:
// a connection that is down ErrUnavailable (a waiting Acquire tries
// again), a refusal ErrAccessDenied (it does not).
func (b *backend) classify(err error) error {
	switch {
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed):
		return driver.AccessDenied(b.addr, err)
	case errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, errSessionLost):
		return driver.Unavailable(b.addr, err)
	}
	return err
}
