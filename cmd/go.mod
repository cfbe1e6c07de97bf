// The tools' module: the distlock command (run, bench, compare), the fault
// harness (internal/faults) and their heavy dependencies (toxiproxy,
// porcupine, charts), kept out of the library module's graph so that
// `go get github.com/distlock/distlock` pulls none of them.
//
// Inside this repository the go.work at the root makes builds and tests use
// the library from the working tree, whatever version is required below.
// The version of github.com/distlock/distlock required below is a
// placeholder until the library's first tagged release (go.work's replace
// points it at the tree). A release tags the library (vX.Y.Z), then bumps
// the requirement below to it (and go.work's replace with it) and tags this
// module cmd/vX.Y.Z, so that
// `go install github.com/distlock/distlock/cmd/distlock@latest` builds
// against the released library. No replace directive here: go install
// pkg@version refuses a module that has one.
module github.com/distlock/distlock/cmd

go 1.26.0

// The complexity check of `make test` (library functions at most 15).
tool github.com/fzipp/gocyclo/cmd/gocyclo

require (
	cirello.io/pglock v1.16.0
	github.com/fzipp/gocyclo v0.6.0
	github.com/Shopify/toxiproxy/v2 v2.5.0
	github.com/anishathalye/porcupine v1.3.1
	github.com/bsm/redislock v0.9.4
	github.com/distlock/distlock v0.0.0-00010101000000-000000000000
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/go-zookeeper/zk v1.0.4
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lib/pq v1.10.9
	github.com/prometheus/client_golang v1.13.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/rs/zerolog v1.28.0
	github.com/spf13/pflag v1.1.0
	github.com/wcharczuk/go-chart/v2 v2.1.2
	go.etcd.io/etcd/client/v3 v3.5.35
	go.uber.org/zap v1.27.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/distlock/distlock/all v0.0.0-00010101000000-000000000000
	github.com/distlock/distlock/etcd v0.0.0-00010101000000-000000000000
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.16 // indirect
	github.com/matttproud/golang_protobuf_extensions v1.0.1 // indirect
	github.com/prometheus/client_model v0.2.0 // indirect
	github.com/prometheus/common v0.37.0 // indirect
	github.com/prometheus/procfs v0.8.0 // indirect
	github.com/rs/xid v1.4.0 // indirect
	go.etcd.io/etcd/api/v3 v3.5.35 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.35 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/image v0.18.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	gopkg.in/tomb.v1 v1.0.0-20141024135613-dd632973f1e7 // indirect
)
