package redisnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/driver/urlparam"
)

// Denied reports whether err is the server refusing the client rather than
// failing to answer: a wrong or missing password (WRONGPASS, NOAUTH), a
// command, key or channel the user's ACL does not grant (NOPERM, or the
// ACL error of a command inside a script), or a TLS handshake that one side
// refused.
func Denied(err error) bool {
	return deniedCause(err) != ""
}

// deniedCause says why err is a refusal, "" when it is not one.
func deniedCause(err error) string {
	if err == nil {
		return ""
	}
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if goredis.HasErrorPrefix(err, p) {
			return "refused by the server's ACL"
		}
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		// A command a script runs and the ACL does not grant: Redis 7.0
		// says "The user executing the script can't run this command or
		// subcommand", later versions "ACL failure in script".
		msg := rerr.Error()
		if strings.Contains(msg, "ACL failure") || strings.Contains(msg, "user executing the script can't") ||
			strings.Contains(msg, "No permissions to access") {
			return "refused by the server's ACL"
		}
		return ""
	}
	return tlsCause(err)
}

// tlsCause names the TLS failure in err, "" if it is none.
func tlsCause(err error) string {
	if urlparam.CertificateRefused(err) {
		return "TLS: the server's certificate is not trusted (ca_file, server_name)"
	}
	var alert tls.AlertError
	var op *net.OpError
	if errors.As(err, &alert) || (errors.As(err, &op) && op.Op == "remote error") {
		return "TLS: the server refused the handshake (its CA must have signed cert_file)"
	}
	return ""
}

// Classify makes err, an error of a call to the server at addr, match
// distlock.ErrAccessDenied when it is a refusal (see Denied), naming the
// cause; other errors are returned as they are.
func Classify(addr string, err error) error {
	cause := deniedCause(err)
	if cause == "" {
		return err
	}
	return driver.AccessDenied(addr, fmt.Errorf("%s: %w", cause, err))
}

// DialError is the error of an Open whose first request to addr failed:
// ErrAccessDenied for a refusal, ErrUnavailable otherwise. A TLS client
// (tlsOn) that reached a server not speaking TLS is told so: one that
// answers sends no TLS record, and redis-server says nothing at all (it
// waits for the end of a line the ClientHello never sends).
func DialError(addr string, tlsOn bool, err error) error {
	if Denied(err) {
		return Classify(addr, err)
	}
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		err = fmt.Errorf("TLS: the server did not answer in TLS (a plain-text port?): %w", err)
	case tlsOn && errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("no answer to the TLS handshake or PING (a plain-text port answers nothing to TLS): %w", err)
	}
	return driver.Unavailable(addr, err)
}
