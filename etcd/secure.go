package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// refused reports whether err is etcd's refusal of the client: a wrong
// password, no user (auth is on and the client gave neither a password nor
// a certificate naming a user), a permission its roles lack, or a token the
// server no longer accepts. clientv3 returns these as rpctypes.EtcdError
// values, and some paths (watches) as the gRPC status they come from.
func refused(err error) bool {
	var ee rpctypes.EtcdError
	if !errors.As(err, &ee) {
		var gs interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &gs) {
			return false
		}
		var ok bool
		if ee, ok = rpctypes.Error(gs.GRPCStatus().Err()).(rpctypes.EtcdError); !ok {
			return false
		}
	}
	switch ee {
	case rpctypes.ErrPermissionDenied, rpctypes.ErrAuthFailed, rpctypes.ErrUserEmpty, rpctypes.ErrInvalidAuthToken:
		return true
	}
	return false
}

// denied makes *err match ErrAccessDenied, naming the client's endpoints,
// when it is etcd's refusal (refused): deferred by every method the
// portable layer calls, so a missing permission is an answer, not a
// failure a waiting Acquire would retry.
func (b *backend) denied(err *error) {
	if *err != nil && refused(*err) && !errors.Is(*err, driver.ErrAccessDenied) {
		*err = driver.AccessDenied(strings.Join(b.cli.Endpoints(), ","), *err)
	}
}

// failed is err, as an Open that failed with it after the TLS check
// returns it: AccessDenied if etcd refused the client, else Unavailable,
// saying so if a plain client met a server that speaks TLS (the gRPC
// client then only times out).
func (dc dialConfig) failed(ctx context.Context, err error) error {
	addr := strings.Join(dc.endpoints, ",")
	if refused(err) {
		return driver.AccessDenied(addr, err)
	}
	if dc.tls == nil && ctx.Err() == nil && speaksTLS(ctx, dc.endpoints) {
		err = fmt.Errorf("etcd: the server speaks TLS: use etcds:// (and ca_file=… unless the system trusts its CA): %w", err)
	}
	return driver.Unavailable(addr, err)
}

// speaksTLS reports whether the first endpoint answers a TLS handshake
// within a second (or before ctx ends).
func speaksTLS(ctx context.Context, endpoints []string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", endpoints[0])
	if err != nil {
		return false
	}
	defer raw.Close()
	// Only whether it answers in TLS: nothing is sent after the handshake.
	err = tls.Client(raw, &tls.Config{InsecureSkipVerify: true}).HandshakeContext(ctx) //nolint:gosec // no data is sent
	var op *net.OpError
	return err == nil || errors.As(err, &op) && op.Op == "remote error"
}

// reachTLS checks every endpoint at once, as handshake does, within
// timeout: nil as soon as one accepts the client; otherwise the first
// refusal (AccessDenied, naming that endpoint and the TLS cause), or
// Unavailable with every endpoint's error.
//
// Open cannot leave this to the etcd client: its gRPC connection retries a
// failed handshake in the background, and its calls wait for a connection
// that never comes until their context ends, with the context's error and
// not the handshake's.
func reachTLS(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel() // ends the handshakes still under way
	type result struct {
		addr   string
		denied bool
		err    error
	}
	results := make(chan result, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			denied, err := handshake(ctx, ep, cfg)
			results <- result{ep, denied, err}
		}()
	}
	var failed []error
	var refusal *result
	for range endpoints {
		r := <-results
		switch {
		case r.err == nil:
			return nil
		case r.denied && refusal == nil:
			refusal = &r
		case !r.denied:
			failed = append(failed, fmt.Errorf("%s: %w", r.addr, r.err))
		}
	}
	if refusal != nil {
		return driver.AccessDenied(refusal.addr, refusal.err)
	}
	return driver.Unavailable(strings.Join(endpoints, ","), errors.Join(failed...))
}

// handshake makes a TLS connection to addr with cfg, as the etcd client's
// gRPC connection would (ALPN h2, the host as server name unless cfg names
// one), and waits for the server's first HTTP/2 frame. denied says that the
// server refused the client or that the client does not trust the server.
//
// The wait is what tells a client certificate the server refused under TLS
// 1.3: the client's side of the handshake ends before the server has
// checked the certificate, and the server's refusal is an alert the client
// reads where it expected the server's first data. An etcd server (Go's
// HTTP/2) sends its SETTINGS frame unasked to a client it accepted; a
// server that waits for the client to speak first gets no verdict here
// until ctx ends, and is then taken as accepting.
func handshake(ctx context.Context, addr string, cfg *tls.Config) (denied bool, err error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer raw.Close()
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Now()) })
	defer stop()
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c.NextProtos = []string{"h2"}
	conn := tls.Client(raw, c)
	if err := conn.HandshakeContext(ctx); err != nil {
		return tlsRefusal(err)
	}
	var frame [9]byte // an HTTP/2 frame header
	if _, err := io.ReadFull(conn, frame[:]); err != nil {
		var op *net.OpError
		switch {
		case ctx.Err() != nil:
			return false, nil // no verdict: the etcd client will tell
		case errors.As(err, &op) && op.Op == "remote error":
			return tlsRefusal(err)
		}
		return false, fmt.Errorf("etcd: the server closed the TLS connection before it spoke: %w", err)
	}
	return false, nil
}

// tlsRefusal tells a TLS refusal (the server's alert, a server certificate
// the client does not trust) from a failure to reach the server, and names
// the cause (also of a server that does not speak TLS).
func tlsRefusal(err error) (denied bool, _ error) {
	var (
		op        *net.OpError
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &op) && op.Op == "remote error":
		return true, fmt.Errorf("etcd: the server refused the TLS connection (is the client certificate missing, or not one it trusts?): %w", err)
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &host), errors.As(err, &invalid):
		return true, fmt.Errorf("etcd: the server's certificate is not trusted (ca_file, server_name): %w", err)
	case errors.As(err, &header), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// A misdirected client, not a refusal: Unavailable, but named. A
		// plain etcd closes a connection it cannot read as HTTP.
		return false, fmt.Errorf("etcd: the server does not speak TLS (use etcd:// without TLS parameters, or its TLS port): %w", err)
	}
	return false, err
}
