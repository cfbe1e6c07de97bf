// Package testserver starts real redis-server, etcd, ZooKeeper and PostgreSQL
// processes for tests and injects process faults into them.
//
// Every server runs as a child process of the test binary on free loopback
// ports, with its data, configuration and log in a directory from t.TempDir.
// The constructors block until the server answers real requests and register
// a t.Cleanup that kills and reaps it. A test whose server binary is missing
// is skipped, or fails when the environment variable CI is "true".
//
// Fault injection reaches a server's child processes too (PostgreSQL
// backends, Redis rewrite children), so a paused server answers nothing and a
// killed one leaves nothing behind. Servers die with the test binary, even
// when paused. Linux is the supported platform; elsewhere on Unix only the
// process group is reached.
//
// Start and StartCluster start the same servers for a program rather than a
// test (distlock bench uses them); the program closes them.
package testserver
