package testserver

import "time"

// config holds the settings that Options change.
type config struct {
	startTimeout     time.Duration
	redisAppendFsync string // "" = no persistence at all
	redisSec         redisSecurity
	etcdHeartbeat    time.Duration
	etcdElection     time.Duration
	etcdSec          etcdSecurity // WithEtcdTLS, WithEtcdAuth
	zkTick           time.Duration
	zkMaxSession     time.Duration // 0: 60 s
	zkReapInterval   time.Duration // 0: the server's default, 60 s
	zkReapPerMinute  int           // 0: the server's default, 10000
	zkSecure         zkSecurity    // WithZKTLS, WithZKSuperPassword (zookeeper.go)
	pgFsync          bool
	preferPorts      []int // WithPreferredPorts
}

// Option changes how a server is configured.
type Option func(*config)

func newConfig(opts []Option) *config {
	c := &config{
		etcdHeartbeat: 50 * time.Millisecond,
		etcdElection:  500 * time.Millisecond,
		zkTick:        100 * time.Millisecond,
		pgFsync:       true,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithStartTimeout bounds how long a start waits for the server to become
// ready (default 15 s; 30 s for ZooKeeper).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// WithRedisAppendFsync turns on Redis's append-only file with the given
// appendfsync policy: "always", "everysec" or "no". Without it Redis persists
// nothing, so a restart starts empty.
func WithRedisAppendFsync(policy string) Option {
	return func(c *config) { c.redisAppendFsync = policy }
}

// WithEtcdTiming sets etcd's raft heartbeat interval and election timeout
// (default 50 ms and 500 ms, so elections after a fault are fast).
func WithEtcdTiming(heartbeat, election time.Duration) Option {
	return func(c *config) { c.etcdHeartbeat, c.etcdElection = heartbeat, election }
}

// WithZKTickTime sets ZooKeeper's tickTime (default 100 ms). The server
// accepts session timeouts from 2 ticks up to 60 s.
func WithZKTickTime(d time.Duration) Option { return func(c *config) { c.zkTick = d } }

// WithZKMaxSessionTimeout sets ZooKeeper's maxSessionTimeout (default 60 s):
// the server grants no client a longer session timeout than this.
func WithZKMaxSessionTimeout(d time.Duration) Option { return func(c *config) { c.zkMaxSession = d } }

// WithZKContainerReaper sets how often ZooKeeper's container reaper looks
// for empty container znodes (znode.container.checkIntervalMs, default 60 s)
// and how many it deletes per minute at most (znode.container.maxPerMinute,
// default 10000; above 60000 it does not pause between deletions). A zero
// keeps the server's default. Tests that wait for an empty key directory to
// go set the interval to a fraction of a second.
func WithZKContainerReaper(interval time.Duration, maxPerMinute int) Option {
	return func(c *config) { c.zkReapInterval, c.zkReapPerMinute = interval, maxPerMinute }
}

// WithPostgresFsync turns PostgreSQL's fsync setting on (the default) or off.
func WithPostgresFsync(on bool) Option { return func(c *config) { c.pgFsync = on } }

// WithPreferredPorts asks for these client ports, one per member, in place
// of random ones when all of them are free (other ports, such as etcd's
// peer port, stay random). If one is taken, or the count differs from the
// number of members, the members get random free ports: compare Port.
func WithPreferredPorts(ports ...int) Option {
	return func(c *config) { c.preferPorts = ports }
}
