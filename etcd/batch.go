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

var _ driver.BatchRefresher = (*backend)(nil)

// RefreshBatch refreshes many locks as Refresh would, each lock on its own
// lease still, in a few round trips: the keep-alives of all their leases
// pipelined on one lease stream, then one transaction per 64 locks that
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
	type item struct {
		r *driver.Refresh
		h *handle
		l *lease
	}
	items := make([]item, 0, len(batch))
	var renew []*lease
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
			items = append(items, item{r, h, l})
			if l.left(start) < r.TTL {
				renew = append(renew, l)
			}
		}
	}
	errs := b.keepAliveAll(ctx, start, renew)
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
	for len(check) > 0 {
		part := check[:min(len(check), checkBatch)]
		check = check[len(part):]
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
	return nil
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
	type part struct {
		stream pb.Lease_LeaseKeepAliveClient
		ls     []*lease
		errs   []error
		err    error
	}
	parts := make([]part, 0, (len(ls)+keepAlivePerStream-1)/keepAlivePerStream)
	for i := 0; i < len(ls); i += keepAlivePerStream {
		j := min(i+keepAlivePerStream, len(ls))
		p := part{ls: ls[i:j], errs: errs[i:j]}
		p.stream, p.err = b.leases.LeaseKeepAlive(sctx)
		for _, l := range p.ls {
			if p.err != nil {
				break
			}
			p.err = p.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(l.id)})
		}
		if p.err == nil {
			p.err = p.stream.CloseSend()
		}
		parts = append(parts, p)
	}
	for _, p := range parts {
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
	return errs
}
