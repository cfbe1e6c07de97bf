package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// New wraps a client you configured yourself (TLS, auth…); closing the
// Locker leaves the client open.
func ExampleNew() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	locker, err := etcd.New(cli, etcd.WithPrefix("myapp/locks"), distlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	err = locker.Do(ctx, "nightly-report", func(ctx context.Context, lease *distlock.Lease) error {
		// Pass lease.Token() to whatever you write, and have it refuse
		// tokens older than one it has seen.
		fmt.Println("running with token", lease.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Open makes the client itself; the Locker's Close closes it.
func Example_open() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	locker, err := distlock.Open(ctx, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/?prefix=myapp/locks&ttl=15s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	fmt.Println(locker.Guarantees().FailuresTolerated) // 1 for three endpoints
}

// A lease's clientv3.Cmp guards your own etcd writes: the transaction
// commits only while the lease still owns the lock.
func Example_guardedWrite() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locker, err := etcd.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	var owns clientv3.Cmp
	lease.As(&owns)
	resp, err := cli.Txn(ctx).If(owns).Then(clientv3.OpPut("config/value", "42")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", resp.Succeeded) // false once the lock is lost
}
