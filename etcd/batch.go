package etcd

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// keepAlivePerStream is how many keep-alives go on one lease stream.
	keepAlivePerStream = 16
	// checkBatch is how many locks one ownership check reads: two
	// comparisons each, within etcd's default --max-txn-ops of 128.
	checkBatch = 64
)

// RefreshBatch refreshes many locks as Refresh would, each lock on its own
// lease still, in a few round trips: the keep-alives of all their leases
// pipelined on a few lease streams, then one transaction per 64 locks that
// checks each key is still ours (and, only if one is not, reads them to
// tell which). A lock whose TTL changes moves to another lease, by Refresh.
func (b *backend) RefreshBatch(ctx context.Context, batch []driver.Refresh) (err error) {
	defer func() {
		b.denied(&err)
		for i := range batch {
			b.denied(&batch[i].Err)
		}
	}()
	start := time.Now()
	items, renew := b.refreshItems(ctx, batch, start)
	errs := b.keepAliveAll(ctx, start, renew)
	check := renewed(items, renew, errs)
	for len(check) > 0 {
		part := check[:min(len(check), checkBatch)]
		check = check[len(part):]
		b.checkOwned(ctx, start, part)
	}
	return nil
}

// refreshItem is one lock of a RefreshBatch that stays on its lease.
type refreshItem struct {
	r *driver.Refresh
	h *handle
	l *lease
}

// refreshItems sorts batch: a lock no longer held fails, one whose TTL
// changes is refreshed by Refresh (it moves to another lease), and the others
// are returned, with the leases among theirs that have less than the TTL
// left as of start and so need a keep-alive.
func (b *backend) refreshItems(ctx context.Context, batch []driver.Refresh, start time.Time) (items []refreshItem, renew []*lease) {
	items = make([]refreshItem, 0, len(batch))
	for i := range batch {
		r := &batch[i]
		h, err := handleOf(r.Grant)
		if err != nil {
			r.Err = err
			continue
		}
		h.mu.Lock()
		state, l := h.state, h.lease
		h.mu.Unlock()
		switch {
		case state != held:
			r.Err = fmt.Errorf("%w: etcd: %q already released", distlock.ErrNotHeld, h.key)
		case leaseSeconds(r.TTL) != l.secs:
			r.Validity, r.Err = b.Refresh(ctx, r.Grant, r.TTL)
		default:
			items = append(items, refreshItem{r, h, l})
			if l.left(start) < r.TTL {
				renew = append(renew, l)
			}
		}
	}
	return items, renew
}

// renewed applies the outcome of the keep-alives of renew (errs, by index) to
// items: a lock whose lease is gone ends, one whose renewal failed otherwise
// fails, and the rest are returned (in items' backing array) for the check
// that their keys are still ours.
func renewed(items []refreshItem, renew []*lease, errs []error) []refreshItem {
	failed := make(map[*lease]error, len(errs))
	for i, err := range errs {
		if err != nil {
			failed[renew[i]] = err
		}
	}
	check := items[:0]
	for _, it := range items {
		err, ok := failed[it.l]
		switch {
		case !ok:
			check = append(check, it)
		case leaseGone(err):
			it.h.end()
			it.r.Err = fmt.Errorf("%w: etcd: the lease of %q has expired or was revoked", distlock.ErrNotHeld, it.h.key)
		default:
			it.r.Err = fmt.Errorf("etcd: renewing the lease of %q: %w", it.h.key, err)
		}
	}
	return check
}

// checkOwned checks, in one transaction, that each key of part still exists
// with its CreateRevision on its lease, and sets each lock's outcome: only a
// key still ours gets a validity, which the lease's time left as of start
// bounds. The Else reads the keys, to tell which failed the check.
func (b *backend) checkOwned(ctx context.Context, start time.Time, part []refreshItem) {
	cmps := make([]clientv3.Cmp, 0, 2*len(part))
	gets := make([]clientv3.Op, 0, len(part))
	for _, it := range part {
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(it.h.key), "=", it.h.rev),
			clientv3.Compare(clientv3.LeaseValue(it.h.key), "=", int64(it.l.id)))
		gets = append(gets, clientv3.OpGet(it.h.key, clientv3.WithKeysOnly()))
	}
	resp, err := b.cli.Txn(ctx).If(cmps...).Else(gets...).Commit()
	for i, it := range part {
		switch {
		case err != nil:
			it.r.Err = fmt.Errorf("etcd: checking %q: %w", it.h.key, err)
		case !resp.Succeeded && !stillOurs(resp.Responses[i], it.h.rev, it.l.id):
			it.h.end()
			it.r.Err = fmt.Errorf("%w: etcd: %q is gone", distlock.ErrNotHeld, it.h.key)
		default:
			it.r.Validity = max(min(it.r.TTL, it.l.left(start)), time.Nanosecond)
		}
	}
}

// stillOurs reads a check's Get: the key exists with our CreateRevision, on
// our lease.
func stillOurs(r *pb.ResponseOp, rev int64, id clientv3.LeaseID) bool {
	kvs := r.GetResponseRange().GetKvs()
	return len(kvs) == 1 && kvs[0].CreateRevision == rev && kvs[0].Lease == int64(id)
}

// keepAliveAll renews ls with pipelined keep-alives, keepAlivePerStream to
// a stream and the streams side by side, and records each confirmation as
// of start. It returns each lease's error: nil if renewed, ErrLeaseNotFound
// if the lease is gone.
//
// Not all on one stream: the server answers a stream's requests one after
// the other, and each waits for the leader to apply what it has committed
// (and, for a lease past its expiry, for its revocation), so under write
// load one long stream would queue every renewal behind those waits.
// Every request is sent before any answer is read: a few KiB at most, well
// inside gRPC's flow-control windows.
func (b *backend) keepAliveAll(ctx context.Context, start time.Time, ls []*lease) []error {
	errs := make([]error, len(ls))
	switch len(ls) {
	case 0:
		return errs
	case 1:
		errs[0] = b.keepAlive(ctx, ls[0])
		return errs
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := make([]keepAlivePart, 0, (len(ls)+keepAlivePerStream-1)/keepAlivePerStream)
	for i := 0; i < len(ls); i += keepAlivePerStream {
		j := min(i+keepAlivePerStream, len(ls))
		p := keepAlivePart{ls: ls[i:j], errs: errs[i:j]}
		p.stream, p.err = b.sendKeepAlives(sctx, p.ls)
		parts = append(parts, p)
	}
	for i := range parts {
		parts[i].receive(ctx, start)
	}
	return errs
}

// keepAlivePart is one stream of a keepAliveAll: its leases, their errors
// (a window on the caller's), and the stream's own error, which fails every
// lease not answered yet.
type keepAlivePart struct {
	stream pb.Lease_LeaseKeepAliveClient
	ls     []*lease
	errs   []error
	err    error
}

// sendKeepAlives opens a lease stream and sends a keep-alive for each of ls
// on it, then closes its sending side: every request goes out before any
// answer is read.
func (b *backend) sendKeepAlives(ctx context.Context, ls []*lease) (pb.Lease_LeaseKeepAliveClient, error) {
	stream, err := b.leases.LeaseKeepAlive(ctx)
	for _, l := range ls {
		if err != nil {
			break
		}
		err = stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(l.id)})
	}
	if err == nil {
		err = stream.CloseSend()
	}
	return stream, err
}

// receive reads p's answers, in the order sent, and records each
// confirmation as of start. If the stream failed, in sending or here, every
// lease it did not answer gets that error (ctx's, if ctx has ended).
func (p *keepAlivePart) receive(ctx context.Context, start time.Time) {
	got := 0
	for ; p.err == nil && got < len(p.ls); got++ {
		resp, err := p.stream.Recv()
		l := p.ls[got]
		switch {
		case err != nil:
			p.err = err
		case resp.ID != int64(l.id):
			p.err = fmt.Errorf("etcd: keep-alive answered for lease %x, expected %x", resp.ID, l.id)
		case resp.TTL <= 0:
			p.errs[got] = rpctypes.ErrLeaseNotFound
		default:
			l.confirmed(start, resp.TTL)
		}
	}
	if p.err != nil {
		err := clientv3.ContextError(ctx, p.err)
		for i := max(got-1, 0); i < len(p.ls); i++ {
			if p.errs[i] == nil {
				p.errs[i] = err
			}
		}
	}
}
