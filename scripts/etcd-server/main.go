// Command etcd-server is the etcd server the tests start: etcd's own main
// package at the version go.mod names, built by scripts/setup.sh. It is a
// module of its own, outside go.work, because etcd's server module carries
// replace directives, which `go install module@version` refuses.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
