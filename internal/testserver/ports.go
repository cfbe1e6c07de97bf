package testserver

import (
	"fmt"
	"net"
	"sync"
)

var (
	portsMu     sync.Mutex
	portsIssued = map[int]bool{} // never hand out a port twice in one process
)

// freePorts returns n distinct free loopback ports. The listeners stay open
// until all n are chosen so that the kernel does not return one twice.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(ports) < n {
		if len(held) > n+100 {
			return nil, fmt.Errorf("testserver: cannot find %d free ports", n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testserver: find a free port: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if !portsIssued[p] {
			portsIssued[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// preferPorts puts want in place of the client port (the first of each
// nports) in ports, if there is one per member and all are free now.
func preferPorts(ports []int, nports int, want []int) {
	if len(want) == 0 || len(want)*nports != len(ports) {
		return
	}
	for _, p := range want {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return
		}
		l.Close()
	}
	for i, p := range want {
		ports[i*nports] = p
	}
}
