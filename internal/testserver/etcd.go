package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Etcd starts a single-member etcd.
func Etcd(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return EtcdCluster(t, 1, opts...).Members[0]
}

// EtcdCluster starts an etcd cluster of n members. A member is ready when its
// /health endpoint reports a healthy cluster, which needs a leader.
func EtcdCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	cfg := newConfig(opts)
	sp, err := etcdSpec(cfg)
	return &Cluster{Members: startGroup(t, cfg, n, mustSpec(t, sp, err))}
}

// etcdSpec describes etcd members under cfg.
func etcdSpec(cfg *config) (spec, error) {
	bin, err := etcdBinary()
	if err != nil {
		return spec{}, err
	}
	return spec{
		kind: "etcd", nports: 2, timeout: 15 * time.Second,
		setup: func(ms []*Server) error {
			sec := cfg.etcdSec
			scheme, web := "http", (*http.Client)(nil)
			if sec.ca != nil {
				scheme, web = "https", sec.web()
			}
			var authDone atomic.Bool // per start attempt: a restart keeps the data dir, auth and all
			token := fmt.Sprintf("testserver-%d", time.Now().UnixNano())
			var initial []string
			for i, s := range ms {
				initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, s.ports[1]))
			}
			// etcd refuses to start when an ETCD_* variable shadows a flag.
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "ETCD_") {
					env = append(env, kv)
				}
			}
			for i, s := range ms {
				client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, s.port)
				peer := fmt.Sprintf("http://127.0.0.1:%d", s.ports[1])
				s.bin, s.env, s.web = bin, env, web
				// On a restart the data dir exists and etcd ignores the --initial-* flags.
				s.args = []string{
					"--name", fmt.Sprintf("m%d", i),
					"--data-dir", filepath.Join(s.dir, "data"),
					"--listen-client-urls", client, "--advertise-client-urls", client,
					"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
					"--initial-cluster", strings.Join(initial, ","),
					"--initial-cluster-state", "new",
					// A unique token keeps members of different clusters apart even if a port is reused.
					"--initial-cluster-token", token,
					"--heartbeat-interval", fmt.Sprint(cfg.etcdHeartbeat.Milliseconds()),
					"--election-timeout", fmt.Sprint(cfg.etcdElection.Milliseconds()),
					"--logger", "zap", "--log-outputs", "stderr", // zap is 3.5's default; 3.4's is the deprecated capnslog
				}
				s.args = append(s.args, sec.args()...)
				first := i == 0
				s.ready = func(ctx context.Context) error {
					if err := etcdHealthy(ctx, s); err != nil {
						return err
					}
					// Users are the cluster's: one member makes them, once.
					if first && sec.auth && !authDone.Load() {
						if err := etcdEnableAuth(ctx, s, sec); err != nil {
							return err
						}
						authDone.Store(true)
					}
					return nil
				}
			}
			return nil
		},
	}, nil
}

// httpClient keeps no idle connections, which would outlive the servers.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func etcdHealthy(ctx context.Context, s *Server) error {
	var h struct{ Health string }
	if err := etcdJSON(ctx, http.MethodGet, s, "/health", &h); err != nil {
		return err
	}
	if h.Health != "true" {
		return fmt.Errorf("/health: %q", h.Health)
	}
	return nil
}

// etcdIsLeader asks member s through the gRPC gateway whether it is the raft leader.
func etcdIsLeader(s *Server) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		}
		Leader string
	}
	if err := etcdJSON(ctx, http.MethodPost, s, "/v3/maintenance/status", &st); err != nil {
		return false, err
	}
	return st.Leader != "" && st.Leader == st.Header.MemberID, nil
}

func etcdJSON(ctx context.Context, method string, s *Server, path string, v any) error {
	return etcdCall(ctx, method, s, path, map[string]any{}, v)
}

// etcdCall sends in as JSON to path (a POST; a GET sends nothing) and
// decodes the answer into out, if not nil.
func etcdCall(ctx context.Context, method string, s *Server, path string, in, out any) error {
	var body io.Reader
	if method == http.MethodPost {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	scheme, client := "http", httpClient
	if s.web != nil {
		scheme, client = "https", s.web
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+s.Addr()+path, body)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// etcdSecurity is what WithEtcdTLS and WithEtcdAuth ask for.
type etcdSecurity struct {
	ca           *CA // nil: no TLS
	server       KeyPair
	auth         bool
	rootPassword string
	users        []EtcdUser
}

// WithEtcdTLS serves etcd's client port over TLS with the certificate
// server (from ca.Server) and requires of every client a certificate that
// ca issued (--client-cert-auth); with WithEtcdAuth, etcd then takes a
// client certificate's CN as the user name when no password is given.
// Peer traffic stays plain. The package's own health checks present
// server, which ca.Server makes fit for a client too.
func WithEtcdTLS(ca *CA, server KeyPair) Option {
	return func(c *config) { c.etcdSec.ca, c.etcdSec.server = ca, server }
}

// EtcdUser is a user that WithEtcdAuth creates, with a role of the same
// name granted read and write on each of Prefixes.
type EtcdUser struct {
	Name string
	// Password is the user's; "" makes a user without one, who can only
	// log in with a client certificate whose CN is Name (WithEtcdTLS).
	Password string
	// Prefixes are key prefixes: each grants the range of the keys that
	// start with it, as `etcdctl role grant-permission --prefix` does.
	Prefixes []string
}

// WithEtcdAuth turns etcd's authentication on once the cluster is up,
// with a user root (role root) whose password is rootPassword ("": none,
// root then logs in by a certificate with CN root only) and users. It
// goes through the gRPC gateway, as etcdctl would through gRPC: user add,
// role add, role grant-permission --prefix, user grant-role, auth enable.
// Restarts keep them, in the data directory.
func WithEtcdAuth(rootPassword string, users ...EtcdUser) Option {
	return func(c *config) {
		c.etcdSec.auth, c.etcdSec.rootPassword, c.etcdSec.users = true, rootPassword, users
	}
}

// args are etcd's flags for sec.
func (sec etcdSecurity) args() []string {
	var a []string
	if sec.ca != nil {
		a = append(a, "--client-cert-auth", "--trusted-ca-file", sec.ca.File,
			"--cert-file", sec.server.CertFile, "--key-file", sec.server.KeyFile)
	}
	if sec.auth {
		a = append(a, "--bcrypt-cost", "4") // the least: each password login costs a hash
	}
	return a
}

// web is the HTTP client of the package's own checks on a TLS port.
func (sec etcdSecurity) web() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: sec.ca.Pool(), Certificates: []tls.Certificate{sec.server.TLS}},
	}}
}

// etcdEnableAuth makes root and sec's users through member s, then turns
// authentication on. What exists already (a try that failed half-way) is
// left as it is.
func etcdEnableAuth(ctx context.Context, s *Server, sec etcdSecurity) error {
	type call struct {
		path string
		in   map[string]any
	}
	calls := []call{
		{"/v3/auth/user/add", newEtcdUser("root", sec.rootPassword)},
		{"/v3/auth/user/grant", map[string]any{"user": "root", "role": "root"}},
	}
	for _, u := range sec.users {
		calls = append(calls,
			call{"/v3/auth/user/add", newEtcdUser(u.Name, u.Password)},
			call{"/v3/auth/role/add", map[string]any{"name": u.Name}})
		for _, p := range u.Prefixes {
			calls = append(calls, call{"/v3/auth/role/grant", map[string]any{"name": u.Name, "perm": map[string]any{
				"permType": "READWRITE", "key": []byte(p), "range_end": []byte(prefixEnd(p))}}})
		}
		calls = append(calls, call{"/v3/auth/user/grant", map[string]any{"user": u.Name, "role": u.Name}})
	}
	calls = append(calls, call{"/v3/auth/enable", map[string]any{}})
	for _, c := range calls {
		if err := etcdCall(ctx, http.MethodPost, s, c.path, c.in, nil); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("testserver: etcd auth: %w", err)
		}
	}
	return nil
}

func newEtcdUser(name, password string) map[string]any {
	if password == "" {
		return map[string]any{"name": name, "options": map[string]any{"no_password": true}}
	}
	return map[string]any{"name": name, "password": password}
}

// prefixEnd is the end of the range of the keys that start with p: p with
// its last byte below 0xff incremented and what follows dropped (etcd's
// clientv3.GetPrefixRangeEnd).
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00" // every key
}
