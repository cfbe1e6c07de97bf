package zookeeper_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/zookeeper"
)

// Dial makes and owns the session; Close ends it.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := zookeeper.Dial(ctx, []string{"zk1:2181", "zk2:2181", "zk3:2181"},
		zookeeper.WithSessionTimeout(10*time.Second), zookeeper.WithBasePath("/myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = l.Do(ctx, "invoice/42", func(ctx context.Context, lease *distlock.Lease) error {
		// ctx ends if the session is lost; pass lease.Token() to the resource.
		fmt.Println("holding with token", lease.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// New runs on a session the caller made; WithEvents lets the Locker see
// disconnections and expiry.
func ExampleNew() {
	conn, events, err := zk.Connect([]string{"zk1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	l, err := zookeeper.New(conn, zookeeper.WithEvents(events), zookeeper.WithSessionTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lease, err := l.TryAcquire(context.Background(), "report")
	if err != nil {
		log.Fatal(err)
	}
	var n zookeeper.Node
	if lease.As(&n) {
		fmt.Println("lock znode", n.Path, "czxid", n.Czxid)
	}
	_ = lease.Release(context.Background())
}

// A zk:// URL names the servers, the base path and the session timeout.
func Example_open() {
	l, err := distlock.Open(context.Background(), "zk://zk1:2181,zk2:2181,zk3:2181/myapp/locks?session_timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}
