package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
)

// endParallel bounds the S3 calls one batch makes at once.
const endParallel = 16

// endUploads closes the upload of every due multipart grant of gs whose
// outs entry is still empty, before refundAll refunds it: abort first,
// then refund. A grant whose done or refunded marker is set is left to
// refundAll (done, already) without asking S3; one S3 reports completed gets its done marker
// and outcomeDone here, and is never refunded; one aborted now or before
// stays empty for refundAll, whose refunded marker makes its refund the
// only one (a DELETE's or an earlier delivery's included).
//
// A SIGKILL at any line: before the abort, the redelivery aborts; between
// the abort and the refund, the redelivery finds the upload gone and its
// object absent (AbortedBefore) and refunds; after the refund, the
// refunded marker answers already. An error (S3 or Redis unavailable)
// leaves the batch for a later delivery. A grant whose complete is in
// progress (the signer's claim) gets outcomeEarly and is tried again at
// the returned time, when the claim's lease ends.
func (s *sweeper) endUploads(ctx context.Context, gs []ledger.Grant, outs []string) (time.Time, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		retry time.Time
		sem   = make(chan struct{}, endParallel)
	)
	for i, g := range gs {
		if outs[i] != "" || g.UploadID == "" || quota.CheckStatus(g.Tenant, g.URLID) != nil {
			continue // decided, a single PUT, or malformed (refundAll says so)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out, err := s.endUpload(ctx, g)
			mu.Lock()
			defer mu.Unlock()
			var busy *busyError
			switch {
			case errors.As(err, &busy):
				retry = later(retry, busy.until)
			case err != nil:
				errs = append(errs, err)
				return
			}
			outs[i] = out
		})
	}
	wg.Wait()
	return retry, errors.Join(errs...)
}

// busyError is endUpload's answer for a grant a complete holds until.
type busyError struct{ until time.Time }

func (e *busyError) Error() string {
	return "a complete holds the grant until " + e.until.UTC().Format(time.RFC3339)
}

// endUpload closes g's upload (multipart.Closer, the protocol a DELETE
// shares); "" when its refund is owed or refundAll decides it (done,
// already), outcomeDone when S3 reports it completed now.
func (s *sweeper) endUpload(ctx context.Context, g ledger.Grant) (string, error) {
	cl, err := s.closer.End(ctx, g.Tenant, g.URLID, g.UploadID)
	if cl.Ended {
		s.metrics.aborts.WithLabelValues(cl.Ending.String()).Inc()
	}
	switch {
	case err != nil && !cl.Ended && !errors.Is(err, multipart.ErrClaim):
		s.metrics.aborts.WithLabelValues(abortError).Inc()
		return "", err
	case err != nil:
		// Redis unavailable, or an upload S3 completed whose done marker
		// could not be written: never refunded, the batch is retried.
		return "", err
	case cl.Closed == multipart.Busy:
		return outcomeEarly, &busyError{until: s.refunder.now().Add(min(cl.Wait, busyRecheck))}
	case cl.Closed == multipart.Finished && cl.Ended:
		return outcomeDone, nil
	}
	// Owed, or ended before (done, refunded): refundAll refunds it, or
	// answers done (and keeps the marker alive) or already.
	return "", nil
}

// busyRecheck bounds how long a grant a complete holds waits before the
// sweeper asks again. A complete that succeeded keeps its claim to the end
// of its lease (quota.CompleteLease, minutes); its done marker, written by
// the signer or, should that fail, by the completer's ObjectCreated
// seconds later, ends the wait at the next ask (ClaimDone), not at the
// lease's end.
const busyRecheck = 10 * time.Second

// abortError is the aborts series of an End that failed (the batch is
// retried).
const abortError = "error"
