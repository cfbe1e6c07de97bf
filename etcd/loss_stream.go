package etcd

import (
	"context"
	"strconv"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// lossStream is the transport of one loss-watch session: prefix watches
// of deletions, told apart by ids the session picks. create, cancel and
// progress are called from one goroutine, recv from another.
type lossStream interface {
	// create watches the keys under q from revision start (0: the
	// current one) on.
	create(id int64, q string, start int64) error
	cancel(id int64) error
	// progress asks for a progress notice of every watch.
	progress() error
	recv() (*pb.WatchResponse, error)
	// close ends the stream, once its ctx has ended.
	close()
}

// rawStream is a gRPC watch stream of the session's own on the client's
// connection: any number of watches at the cost of none of the client's
// goroutines (clientv3's Watcher keeps one per watch). It ends with its
// ctx, and with it everything it held on the server.
type rawStream struct{ pb.Watch_WatchClient }

func openRaw(conn *grpc.ClientConn) func(context.Context) (lossStream, error) {
	wc := pb.NewWatchClient(conn)
	return func(ctx context.Context) (lossStream, error) {
		st, err := wc.Watch(ctx, grpc.WaitForReady(true))
		if err != nil {
			return nil, err
		}
		return rawStream{st}, nil
	}
}

func (r rawStream) create(id int64, q string, start int64) error {
	return r.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(q), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(q)), StartRevision: start,
		Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}, ProgressNotify: true, WatchId: id,
	}}})
}

func (r rawStream) cancel(id int64) error {
	return r.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
		CancelRequest: &pb.WatchCancelRequest{WatchId: id}}})
}

func (r rawStream) progress() error {
	return r.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{
		ProgressRequest: &pb.WatchProgressRequest{}}})
}

func (r rawStream) recv() (*pb.WatchResponse, error) { return r.Recv() }
func (r rawStream) close()                           {}

// watcherStream carries a session on a clientv3.Watcher that wraps the
// client's (a namespace): only it knows the keys' real names. Each watch
// costs the client a goroutine, and one here, so the loss watch keeps to
// one watch of the whole prefix there (watcher.whole).
//
// Each session has a gRPC stream of its own: clientv3 keeps one stream per
// ctx metadata, and a watch abandoned before its member answered (a hung
// member) pins that stream to the member, with every later watch of the
// same metadata queued behind it, unsent. With the session number as
// metadata, a stream pinned there stays open, idle, until the member
// answers or the client closes.
type watcherStream struct {
	ctx  context.Context
	wt   clientv3.Watcher
	out  chan *pb.WatchResponse
	wg   sync.WaitGroup
	mu   sync.Mutex
	ends map[int64]context.CancelFunc
}

// watchTryKey is the gRPC metadata key that gives each session a stream
// of its own.
const watchTryKey = "distlock-loss-watch-try"

func openWatcher(wt clientv3.Watcher) func(context.Context) (lossStream, error) {
	var tries uint64
	return func(ctx context.Context) (lossStream, error) {
		tries++ // sessions are made one at a time
		ctx = metadata.AppendToOutgoingContext(ctx, watchTryKey, strconv.FormatUint(tries, 10))
		return &watcherStream{ctx: ctx, wt: wt, out: make(chan *pb.WatchResponse), ends: map[int64]context.CancelFunc{}}, nil
	}
}

func (c *watcherStream) create(id int64, q string, start int64) error {
	ctx, end := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.ends[id] = end
	c.mu.Unlock()
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(),
		clientv3.WithCreatedNotify(), clientv3.WithProgressNotify(), clientv3.WithRev(start)}
	wch := c.wt.Watch(ctx, q, opts...)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for wr := range wch {
			if !c.send(ctx, watchResponse(id, wr)) {
				return
			}
		}
		if ctx.Err() == nil { // closed by the client
			c.send(ctx, &pb.WatchResponse{WatchId: id, Canceled: true, CancelReason: "watch closed"})
		}
	}()
	return nil
}

func (c *watcherStream) send(ctx context.Context, resp *pb.WatchResponse) bool {
	select {
	case c.out <- resp:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchResponse is wr as the server sent it for watch id.
func watchResponse(id int64, wr clientv3.WatchResponse) *pb.WatchResponse {
	resp := &pb.WatchResponse{Header: &wr.Header, WatchId: id, Created: wr.Created,
		Canceled: wr.Canceled, CompactRevision: wr.CompactRevision}
	if err := wr.Err(); err != nil {
		resp.Canceled, resp.CancelReason = true, err.Error()
	}
	for _, ev := range wr.Events {
		resp.Events = append(resp.Events, (*mvccpb.Event)(ev))
	}
	return resp
}

func (c *watcherStream) cancel(id int64) error {
	c.mu.Lock()
	end := c.ends[id]
	delete(c.ends, id)
	c.mu.Unlock()
	if end != nil {
		end()
	}
	return nil
}

func (c *watcherStream) progress() error {
	ctx, cancel := context.WithTimeout(c.ctx, progressEvery)
	defer cancel()
	return c.wt.RequestProgress(ctx)
}

func (c *watcherStream) recv() (*pb.WatchResponse, error) {
	select {
	case resp := <-c.out:
		return resp, nil
	case <-c.ctx.Done():
		return nil, c.ctx.Err()
	}
}

func (c *watcherStream) close() { c.wg.Wait() }
