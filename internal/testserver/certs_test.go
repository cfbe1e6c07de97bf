package testserver

import (
	"crypto/tls"
	"testing"
)

// A server certificate and a client certificate of one CA complete a
// mutual TLS handshake on loopback; a client of another CA is refused.
func TestCAIssuesMutualTLS(t *testing.T) {
	ca := NewCA(t)
	srv, cli := ca.Server(t, "srv"), ca.Client(t, "alice")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("x"))
			_ = c.Close()
		}
	}()
	dial := func(cert tls.Certificate) error {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		return err
	}
	if err := dial(cli.TLS); err != nil {
		t.Fatalf("client of the CA: %v", err)
	}
	if err := dial(NewCA(t).Client(t, "mallory").TLS); err == nil {
		t.Fatal("a client of another CA was let in")
	}
}
