package urlparam

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/distlock/distlock/driver"
)

// TLS and credentials in URLs: one set of query parameters for every
// backend (the names of curl, etcdctl and redis-cli, as files):
//
//	tls=true                  use TLS (implied by any parameter below, and by a
//	                          TLS scheme such as rediss://)
//	ca_file=/path/ca.pem      trust these CAs instead of the system's
//	cert_file=/path/c.pem     client certificate (mutual TLS), with key_file
//	key_file=/path/c-key.pem
//	server_name=redis.internal  the name to verify the server certificate for
//	                          (default: the host dialled)
//	skip_verify=true          do not verify the server certificate (tests only)
//	password_file=/run/secrets/p  the password, read from a file (a container
//	                          secret) instead of the URL's user:password@
//
// A secret never appears in an error: Redact is how errors name a URL.

// TLSParams are the TLS parameters of a URL, as read by ReadTLS.
type TLSParams struct {
	On                bool // TLS asked for
	CAFile            string
	CertFile, KeyFile string
	ServerName        string
	SkipVerify        bool
	base              *tls.Config // WithTLSConfig's, if any
}

// ReadTLS reads the TLS parameters of q; on is whether the scheme itself
// asks for TLS (rediss://). base, if not nil, is the caller's *tls.Config
// (WithTLSConfig), which the parameters then amend.
func ReadTLS(q *Query, on bool, base *tls.Config) TLSParams {
	p := TLSParams{On: on || base != nil, base: base}
	if b, ok := q.Bool("tls"); ok {
		p.On = b || p.On
	}
	var set bool
	for name, dst := range map[string]*string{"ca_file": &p.CAFile, "cert_file": &p.CertFile, "key_file": &p.KeyFile, "server_name": &p.ServerName} {
		if v, ok := q.String(name); ok {
			*dst, set = v, true
		}
	}
	if b, ok := q.Bool("skip_verify"); ok {
		p.SkipVerify, set = b, set || b
	}
	p.On = p.On || set
	return p
}

// Config returns the *tls.Config the parameters describe, or nil when TLS
// was not asked for. host is the host dialled (the default server name).
// A file that cannot be read or parsed is driver.ErrInvalidURL, naming the file
// but never its contents.
func (p TLSParams) Config(host string) (*tls.Config, error) {
	if !p.On {
		return nil, nil
	}
	var cfg *tls.Config
	if p.base != nil {
		cfg = p.base.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if p.ServerName != "" {
		cfg.ServerName = p.ServerName
	}
	if p.SkipVerify {
		cfg.InsecureSkipVerify = true //nolint:gosec // asked for by the URL, for tests
	}
	if p.CAFile != "" {
		pem, err := os.ReadFile(p.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: ca_file: %w", driver.ErrInvalidURL, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: ca_file %s holds no PEM certificate", driver.ErrInvalidURL, p.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case p.CertFile != "" && p.KeyFile != "":
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: cert_file %s / key_file %s: %w", driver.ErrInvalidURL, p.CertFile, p.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{c}
	case p.CertFile != "" || p.KeyFile != "":
		return nil, fmt.Errorf("%w: cert_file and key_file go together", driver.ErrInvalidURL)
	}
	return cfg, nil
}

// Credentials returns the user and password of u, the password read from
// the password_file parameter when there is one (a URL password and a
// password_file together are driver.ErrInvalidURL). A file's trailing newline is
// dropped.
func Credentials(q *Query, u *url.URL) (user, password string, err error) {
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
	}
	path, ok := q.String("password_file")
	if !ok {
		return user, password, nil
	}
	if password != "" {
		return "", "", fmt.Errorf("%w: a password in the URL and a password_file", driver.ErrInvalidURL)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("%w: password_file: %w", driver.ErrInvalidURL, err)
	}
	return user, strings.TrimRight(string(b), "\r\n"), nil
}

// Redact returns raw with any password replaced by "xxxxx" (the userinfo's,
// and a password or secret query parameter's), for errors and logs. A URL
// whose userinfo url.Parse cannot read (MisreadUserinfo) is redacted from
// the scheme's "//" to its last "@", so that no piece of an unencoded
// password survives.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && !MisreadUserinfo(u) {
		q, changed := u.Query(), false
		for k := range q {
			if secretParam(k) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	start := strings.Index(raw, "//") + 2
	if start < 2 { // no "//": "scheme:user:password@host", all of it hidden
		start = strings.Index(raw, ":") + 1
	}
	rest := raw[start:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	userinfo := "xxxxx"
	if c := strings.IndexAny(rest[:at], ":/?#"); c >= 0 && start > 0 && raw[start-1] == '/' {
		userinfo = rest[:c] + ":xxxxx"
	}
	return raw[:start] + userinfo + rest[at:]
}

// MisreadUserinfo reports whether u, parsed from a URL, holds an "@" in its
// path, fragment or opaque part: a password with an unencoded "/", "?" or
// "#" ended the userinfo early (or a "scheme:user:password@host" had no
// "//"), and the rest was read as something else. A path that really holds
// an "@" must percent-encode it.
func MisreadUserinfo(u *url.URL) bool {
	return strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.EscapedFragment(), "@") || strings.Contains(u.Opaque, "@")
}

// HasUserinfo reports whether raw seems to carry user information (an "@"
// after the scheme's "//"), for errors that must not quote url.Parse's
// message, which may hold a piece of the password.
func HasUserinfo(raw string) bool {
	i := strings.Index(raw, "//")
	return i >= 0 && strings.Contains(raw[i+2:], "@")
}

// secretParam reports whether a query parameter holds a secret itself (not
// a file's path).
func secretParam(name string) bool {
	n := strings.ToLower(name)
	return (strings.Contains(n, "password") || strings.Contains(n, "secret") || strings.Contains(n, "token")) &&
		!strings.HasSuffix(n, "_file")
}

// CertificateRefused reports whether err is the client refusing the
// server's certificate (an unknown authority, a wrong host name, an
// invalid certificate), as the TLS handshake or x509 reports it.
func CertificateRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) || errors.As(err, &invalid)
}
