package testserver

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const zkJar = "/usr/share/java/zookeeper.jar" // Debian's; its manifest Class-Path lists its dependencies

// ZooKeeper starts a standalone ZooKeeper server.
func ZooKeeper(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return ZooKeeperEnsemble(t, 1, opts...).Members[0]
}

// ZooKeeperEnsemble starts a ZooKeeper ensemble of n servers (a standalone
// server for n == 1). A member is ready when it serves as leader, follower or
// standalone, which for an ensemble needs a quorum.
func ZooKeeperEnsemble(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	cfg := newConfig(opts)
	sp, err := zkSpec(cfg, n)
	return &Cluster{Members: startGroup(t, cfg, n, mustSpec(t, sp, err))}
}

// zkSpec describes an ensemble of n ZooKeeper servers under cfg.
func zkSpec(cfg *config, n int) (spec, error) {
	java, err := lookBinary("java", "java", "/usr/bin/java")
	if err != nil {
		return spec{}, err
	}
	jar, err := lookBinary("ZooKeeper ("+zkJar+")", zkJar)
	if err != nil {
		return spec{}, err
	}
	cp := zkClasspath(jar, cfg.zkSecure.ca != nil)
	nports := 1
	if n > 1 {
		nports = 3 // client, quorum, election
	}
	if cfg.zkSecure.ca != nil {
		nports++ // the secureClientPort, last
	}
	tick := max(cfg.zkTick.Milliseconds(), 1)
	maxSession := int64(60000)
	if cfg.zkMaxSession > 0 {
		maxSession = max(cfg.zkMaxSession.Milliseconds(), 2*tick)
	}
	return spec{
		kind: "zookeeper", nports: nports, timeout: 30 * time.Second,
		setup: func(ms []*Server) error {
			for i, s := range ms {
				data := filepath.Join(s.dir, "data")
				if err := os.Mkdir(data, 0o755); err != nil {
					return err
				}
				conf := []string{
					fmt.Sprintf("tickTime=%d", tick),
					// Limits are in ticks; keep them about 10 s and 3 s whatever the tick,
					// so that a starved JVM on a loaded machine does not drop out.
					fmt.Sprintf("initLimit=%d", max(10000/tick, 10)),
					fmt.Sprintf("syncLimit=%d", max(3000/tick, 5)),
					"dataDir=" + data,
					fmt.Sprintf("clientPort=%d", s.port),
					"clientPortAddress=127.0.0.1",
					fmt.Sprintf("minSessionTimeout=%d", 2*tick),
					fmt.Sprintf("maxSessionTimeout=%d", maxSession),
					"maxClientCnxns=0",
					"4lw.commands.whitelist=*",
					"admin.enableServer=false",
				}
				secure, err := zkSecureSetup(cfg, s)
				if err != nil {
					return err
				}
				conf = append(conf, secure.conf...)
				if n > 1 {
					for j, m := range ms {
						conf = append(conf, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", j+1, m.ports[1], m.ports[2]))
					}
					if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
						return err
					}
				}
				cfgPath := filepath.Join(s.dir, "zoo.cfg")
				if err := os.WriteFile(cfgPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
					return err
				}
				// Log to stdout, which is the log file, so JVM errors land there too.
				log4j := filepath.Join(s.dir, "log4j.properties")
				if err := os.WriteFile(log4j, []byte(log4jProps), 0o644); err != nil {
					return err
				}
				s.bin = java
				s.args = []string{
					// Small and quick to start: the servers idle, and a JIT beyond C1 only costs CPU here.
					"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
					"-Djava.net.preferIPv4Stack=true",
					"-Dzookeeper.admin.enableServer=false",
					"-Dzookeeper.jmx.log4j.disable=true",
					"-Dzookeeper.cnxTimeout=1000", // election connects to a paused peer give up sooner than 5 s
					"-Dlog4j.configuration=file:" + log4j,
				}
				s.args = append(s.args, zkReaperProps(cfg)...)
				s.args = append(s.args, secure.props...)
				s.args = append(s.args, "-cp", strings.Join(cp, ":"),
					"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath)
				s.ready = func(ctx context.Context) error {
					_, err := zkModeCtx(ctx, s)
					return err
				}
			}
			return nil
		},
	}, nil
}

// zkReaperProps sets the container reaper's settings as system properties:
// the server reads them only from the JVM, not from zoo.cfg.
func zkReaperProps(cfg *config) []string {
	var props []string
	if cfg.zkReapInterval > 0 {
		props = append(props, fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", max(cfg.zkReapInterval.Milliseconds(), 1)))
	}
	if cfg.zkReapPerMinute > 0 {
		props = append(props, fmt.Sprintf("-Dznode.container.maxPerMinute=%d", cfg.zkReapPerMinute))
	}
	return props
}

const log4jProps = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
`

func zkMode(s *Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return zkModeCtx(ctx, s)
}

// zkModeCtx returns the "Mode:" line of the srvr four-letter command. Unlike
// ruok, which answers imok as soon as the process runs, srvr only reports a
// mode while the server serves requests.
func zkModeCtx(ctx context.Context, s *Server) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(c)
	var first string
	for sc.Scan() {
		line := sc.Text()
		if first == "" {
			first = line
		}
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return mode, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("srvr: %q", first)
}

// zkSecurity is a secured ZooKeeper server's setup (WithZKTLS,
// WithZKSuperPassword).
type zkSecurity struct {
	ca     *CA
	server KeyPair
	super  string // the super user's password; "" for none
}

// WithZKTLS gives each ZooKeeper server a secureClientPort (its address:
// SecureAddr) beside its plaintext client port: Netty serves it with TLS,
// presenting server (from ca.Server) and asking clients for a certificate
// that ca issued (ca.Client). A client that presents one is also
// authenticated as x509:<its subject>.
func WithZKTLS(ca *CA, server KeyPair) Option {
	return func(c *config) { c.zkSecure.ca, c.zkSecure.server = ca, server }
}

// WithZKSuperPassword sets the password of ZooKeeper's super user, who
// passes every ACL: tests authenticate as digest "super:<password>" to set
// up or inspect znodes whatever their ACL. Digest auth itself needs no
// setting: every ZooKeeper server accepts it.
func WithZKSuperPassword(password string) Option {
	return func(c *config) { c.zkSecure.super = password }
}

// zkSecurePorts maps a secured server to its secureClientPort.
var zkSecurePorts sync.Map // *Server → int

// SecureAddr returns the address of a ZooKeeper server's secureClientPort
// (WithZKTLS), or "" if it has none.
func (s *Server) SecureAddr() string {
	if p, ok := zkSecurePorts.Load(s); ok {
		return fmt.Sprintf("127.0.0.1:%d", p.(int))
	}
	return ""
}

// zkSecured is what a secured server adds to zoo.cfg and to the JVM's
// system properties.
type zkSecured struct {
	conf, props []string
}

func zkSecureSetup(cfg *config, s *Server) (zkSecured, error) {
	var out zkSecured
	sec := cfg.zkSecure
	if sec.super != "" {
		sum := sha1.Sum([]byte("super:" + sec.super))
		out.props = append(out.props, "-Dzookeeper.DigestAuthenticationProvider.superDigest=super:"+base64.StdEncoding.EncodeToString(sum[:]))
	}
	if sec.ca == nil {
		return out, nil
	}
	port := s.ports[len(s.ports)-1]
	zkSecurePorts.Store(s, port)
	// ZooKeeper reads a PEM key store from one file: the key, then the
	// certificate.
	keyStore := filepath.Join(s.dir, "zk-keystore.pem")
	var pem []byte
	for _, f := range []string{sec.server.KeyFile, sec.server.CertFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return out, err
		}
		pem = append(pem, b...)
	}
	if err := os.WriteFile(keyStore, pem, 0o600); err != nil {
		return out, err
	}
	out.conf = append(out.conf, fmt.Sprintf("secureClientPort=%d", port), "secureClientPortAddress=127.0.0.1")
	out.props = append(out.props,
		"-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"-Dzookeeper.ssl.keyStore.location="+keyStore,
		"-Dzookeeper.ssl.keyStore.type=PEM",
		"-Dzookeeper.ssl.trustStore.location="+sec.ca.File,
		"-Dzookeeper.ssl.trustStore.type=PEM",
		// The secure port authenticates a client's certificate with the
		// x509 provider, which is not registered by default.
		"-Dzookeeper.authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
	)
	return out, nil
}

// zkClasspath is zookeeper.jar (whose manifest lists most of its
// dependencies), a logging binding, and for a secure port the Netty jars
// Debian's manifest leaves out (codec, resolver).
func zkClasspath(jar string, secure bool) []string {
	// slf4j needs a binding or ZooKeeper logs nothing; Debian ships log4j 1.2 for it.
	extra := []string{"slf4j-log4j12", "log4j-1.2"}
	if secure {
		extra = append(extra, "netty-codec", "netty-resolver", "netty-transport-native-unix-common")
	}
	cp := []string{jar}
	for _, name := range extra {
		p := "/usr/share/java/" + name + ".jar"
		if _, err := os.Stat(p); err == nil {
			cp = append(cp, p)
		}
	}
	return cp
}
