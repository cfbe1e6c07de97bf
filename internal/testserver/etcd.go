package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
				client := fmt.Sprintf("http://127.0.0.1:%d", s.port)
				peer := fmt.Sprintf("http://127.0.0.1:%d", s.ports[1])
				s.bin, s.env = bin, env
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
				s.ready = func(ctx context.Context) error { return etcdHealthy(ctx, s) }
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
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.Addr()+path, body)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
