package etcd

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cleanupTimeout bounds the deletes made after the caller's context ended (a
// cancelled waiter removing its key) and Close's revokes.
const cleanupTimeout = time.Second

// New returns a Locker on client. The client stays the caller's: closing the
// Locker does not close it. opts are distlock's options (WithTTL…) and this
// package's (WithPrefix, WithLossWatch).
//
// Guarantees().FailuresTolerated assumes the client's endpoints are the
// cluster's members: a minority of them, (n−1)/2.
func New(client *clientv3.Client, opts ...distlock.Option) (distlock.Locker, error) {
	lockerOpts, backendOpts := driver.SplitOptions(opts)
	b, err := newBackend(client, false, backendOpts)
	if err != nil {
		return nil, err
	}
	return distlock.New(b, lockerOpts...) // closes b if it fails
}

// NewBackend returns the raw Backend on client, for wrapping (tests,
// middleware) before passing it to distlock.New. It takes etcd's own
// options and WithLogger; the portable ones go to distlock.New. As with
// New, the client is not closed by Close.
func NewBackend(client *clientv3.Client, opts ...distlock.Option) (driver.Backend, error) {
	b, err := newBackend(client, false, driver.Options(opts))
	if err != nil {
		return nil, err // not a nil *backend in a non-nil interface
	}
	return b, nil
}

func newBackend(cli *clientv3.Client, owns bool, opts []driver.Option) (*backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd: nil client", distlock.ErrInvalidOption)
	}
	o, err := driver.ResolveBackend("etcd", opts)
	if err != nil {
		return nil, err
	}
	prefix := driver.BackendValueOr[string](o, prefixKey{}, DefaultPrefix)
	loss := driver.BackendValueOr[bool](o, lossWatchKey{}, true)
	life, stop := context.WithCancel(context.Background())
	b := &backend{
		cli: cli, owns: owns, prefix: prefix, lossWatch: loss,
		tolerated: (len(cli.Endpoints()) - 1) / 2,
		life:      life, stop: stop,
		spares:  map[int64][]*lease{},
		dropped: map[string]*lease{},
		names:   map[string]string{},

		watchCreate: defaultWatchCreate,
	}
	b.leases = clientv3.RetryLeaseClient(cli)
	b.loss = &watcher{b: b, queues: map[string]*queueWatch{}}
	// A Watcher of the client's own watches the keys the raw stream would;
	// a wrapped one (namespace) does not.
	if conn := cli.ActiveConnection(); conn != nil && reflect.TypeOf(cli.Watcher) == reflect.TypeOf(clientv3.NewWatcher(cli)) {
		b.loss.open = openRaw(conn)
	} else {
		b.loss.open, b.loss.whole = openWatcher(cli.Watcher), true
	}
	return b, nil
}

// backend implements driver.Backend, with a server-side queue (Lock).
type backend struct {
	driver.Unsupported
	cli       *clientv3.Client
	owns      bool // the client was made by open and is closed by Close
	prefix    string
	lossWatch bool
	tolerated int

	life context.Context // ends at Close; parent of the loss watch
	stop context.CancelFunc
	wg   sync.WaitGroup // the loss watch's goroutine
	loss *watcher
	// leases is the raw lease API, for pipelined keep-alives (RefreshBatch).
	leases pb.LeaseClient
	// beforeTTL, if set (by tests), runs between Inspect's two reads.
	beforeTTL func()
	// watchCreate bounds how long Watch waits for the server to confirm
	// its watch (defaultWatchCreate; tests shorten it); past it the
	// portable layer polls instead.
	watchCreate time.Duration

	mu     sync.Mutex
	closed bool
	spares map[int64][]*lease // recycled leases by requested seconds
	// dropped are the leases of TryLocks whose outcome is unknown, by
	// queue + owner value: the give-back revokes the lease, which deletes the key
	// and refuses the put if it lands later.
	dropped map[string]*lease
	// names are key names free for reuse, by queue (keyName).
	names map[string]string
}

var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// queue returns the etcd prefix of key's queue: "prefix/escaped-key/".
func (b *backend) queue(key string) string { return queuePrefix(b.prefix, key) }

func queuePrefix(prefix, key string) string {
	return prefix + "/" + keyEscaper.Replace(key) + "/"
}

func (b *backend) Guarantees() driver.Guarantees {
	return driver.Guarantees{
		Backend:           "etcd",
		TokenSource:       "CreateRevision of the owner key (cluster-wide revision)",
		Wait:              driver.WaitQueue,
		FIFO:              true,
		FailuresTolerated: b.tolerated,
		Notes: []string{
			"FailuresTolerated assumes the client's endpoints are the cluster's members: a minority, (n-1)/2, may fail",
			"lease TTLs are whole seconds: a TTL is sent as ceil(TTL)+1s (at least the server's minimum, 2s on etcd defaults); the validity reported never exceeds the TTL, but a crashed holder's lock frees only when that lease expires",
			"a lock acquired after a long wait may report a validity below its TTL (at least about 2/3 of it): use WithAutoRenew or Do",
			"TryAcquire fails while waiters are queued (FIFO), and does not report the holder's remaining TTL",
			"Inspect makes two round trips (the queue, then the holder's lease); its TTL is etcd's, in whole seconds rounded down",
		},
	}
}

// Close stops the loss watch, revokes the recycled leases (best effort,
// bounded) and closes the client if the backend made it (Open). Locks still
// held keep their leases until they expire.
func (b *backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	var spares []*lease
	for _, s := range b.spares {
		spares = append(spares, s...)
	}
	b.spares = nil
	b.mu.Unlock()

	b.loss.close()
	b.stop()
	b.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	now := time.Now()
	for _, l := range spares {
		if l.left(now) > 0 && ctx.Err() == nil {
			_, _ = b.cli.Revoke(ctx, l.id)
		}
	}
	cancel()
	if b.owns {
		return b.cli.Close()
	}
	return nil
}

// As gives access to the etcd client: target must be a **clientv3.Client.
func (b *backend) As(target any) bool {
	if p, ok := target.(**clientv3.Client); ok {
		*p = b.cli
		return true
	}
	return false
}
