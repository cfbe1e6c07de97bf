package testserver

import (
	"context"
	"errors"
	"net"
	"testing"
)

// A free preferred port is used; a taken one falls back to a free port.
func TestStartPreferredPorts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	want, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, KindRedis, t.TempDir(), WithPreferredPorts(want[0]))
	if errors.Is(err, ErrMissing) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Port() != want[0] {
		t.Errorf("free preferred port %d: got %d", want[0], s.Port())
	}
	// s holds the port now, so a second server must not get it.
	s2, err := Start(ctx, KindRedis, t.TempDir(), WithPreferredPorts(want[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Port() == want[0] {
		t.Errorf("taken preferred port %d given again", want[0])
	}
	if err := redisPing(ctx, s2.Addr()); err != nil {
		t.Errorf("PING the fallback server: %v", err)
	}
}

func TestPreferPortsCountMismatch(t *testing.T) {
	free, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ports := []int{1, 2, 3, 4}
	preferPorts(ports, 2, free[:1]) // two members, one preferred port
	if ports[0] != 1 || ports[2] != 3 {
		t.Errorf("count mismatch changed ports: %v", ports)
	}
	preferPorts(ports, 2, free)
	if ports[0] != free[0] || ports[1] != 2 || ports[2] != free[1] || ports[3] != 4 {
		t.Errorf("ports = %v, want client ports %v, the rest kept", ports, free)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	ports = []int{1, 2}
	preferPorts(ports, 1, []int{taken})
	if ports[0] != 1 {
		t.Errorf("taken port %d used: %v", taken, ports)
	}
}
