package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
)

// endParallel bounds the S3 calls one batch makes at once.
const endParallel = 16

// uploadEnder closes multipart uploads: multipart.Uploads.End.
type uploadEnder interface {
	End(ctx context.Context, key, uploadID string) (multipart.Ending, error)
}

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

// endUpload closes g's upload; "" when its refund is owed, outcomeDone when
// it completed.
func (s *sweeper) endUpload(ctx context.Context, g ledger.Grant) (string, error) {
	st, err := s.refunder.store.Status(ctx, g.Tenant, g.URLID)
	if err != nil {
		return "", fmt.Errorf("grant %s: %w", g.URLID, err)
	}
	if st.Done || st.Refunded {
		// refundAll answers done (and keeps the marker alive) or already. A
		// multipart grant is refunded only once its upload was ended (a
		// DELETE, an earlier delivery), or by its create's undo, which
		// answered no upload id: no part can have been signed for it.
		return "", nil
	}
	// The abort's claim: no complete of the signer runs on the upload from
	// here on, and none that runs now is cut short.
	cl, err := s.refunder.store.ClaimAbort(ctx, g.Tenant, g.URLID)
	switch {
	case err != nil:
		return "", fmt.Errorf("claim grant %s: %w", g.URLID, err)
	case cl.Claim == quota.ClaimDone:
		return "", nil
	case cl.Claim == quota.ClaimBusy:
		return outcomeEarly, &busyError{until: s.refunder.now().Add(cl.Wait)}
	}
	// The key is the grant's own, from its tenant and urlId: a grant can
	// only ever end its own upload.
	key := keys.Object(g.Tenant, g.URLID)
	ending, err := s.uploads.End(ctx, key, g.UploadID)
	if err != nil {
		s.metrics.aborts.WithLabelValues(abortError).Inc()
		return "", fmt.Errorf("end the upload of grant %s: %w", g.URLID, err)
	}
	s.metrics.aborts.WithLabelValues(ending.String()).Inc()
	if ending != multipart.Completed {
		return "", nil
	}
	// Completed, and the completer's ObjectCreated not handled yet: the
	// done marker now, as the completer's first step writes it, so that
	// its event is still published.
	_, err = s.refunder.store.Complete(ctx, s.refunder.now(), quota.Completion{
		Tenant: g.Tenant, URLID: g.URLID, Value: quota.DoneUnpublished, TTL: quota.MarkerTTL, First: true,
	})
	if err != nil {
		return "", fmt.Errorf("mark grant %s done: %w", g.URLID, err)
	}
	return outcomeDone, nil
}

// abortError is the aborts series of an End that failed (the batch is
// retried).
const abortError = "error"
