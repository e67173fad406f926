package quota_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/quota/quotatest"
)

// recordGrant stands for the signer's ledger publish.
func recordGrant(context.Context, string) error { return errors.New("ledger: publish timed out") }

// One sign on Redis, as the signer does it: Spend decides; the grant is
// presigned and recorded in the ledger; Finish stores the answer, or Undo
// gives the token back when the ledger did not take the grant. The Store
// sets no timeout: every call carries the caller's deadline.
func ExampleNew() {
	opt, err := redis.ParseURL(os.Getenv("MINTGATE_REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	q := quota.New(redis.NewClient(opt)) // or a *redis.ClusterClient
	tenant, subject := "acme", keys.UserSubject("alice")
	a := quota.Ask{
		Tenant:      tenant,
		Idem:        keys.Idempotency(tenant, subject, "the Idempotency-Key header"),
		Fingerprint: "a hash of what was asked",
		Nonce:       uuid.NewString(), // fresh for each request, retries included
		Buckets: []bucket.Bucket{
			{Key: keys.Bucket(tenant, subject), Limit: bucket.Limit{Capacity: 30, Rate: 0.5}},
			{Key: keys.TenantBucket(tenant), Limit: bucket.Limit{Capacity: 600, Rate: 10}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	d, err := q.Spend(ctx, time.Now(), a, 30*time.Second)
	switch {
	case errors.Is(err, quota.ErrUnavailable):
		// The EVALSHA may still run (a stalled Redis runs it when it
		// resumes): cancel it, retrying while Redis does not answer. The
		// signer hands this to a background goroutine and answers at once.
		for range 10 {
			cctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			_, err := q.Cancel(cctx, time.Now(), a)
			cancel()
			if !errors.Is(err, quota.ErrUnavailable) {
				break
			}
			time.Sleep(time.Second)
		}
		fmt.Println("503: fail closed")
	case d.Outcome == quota.Allowed:
		urlID := "the grant's urlId"
		if err := recordGrant(ctx, urlID); err != nil {
			_, err = q.Undo(ctx, time.Now(), a, urlID)
			fmt.Println("503", err)
			return
		}
		err = q.Finish(ctx, a, quota.Finished{URLID: urlID, Subject: subject, Body: []byte(`{"url":"…"}`),
			ExpiresAt: time.Now().Add(2 * time.Minute), RecordTTL: 2 * time.Minute, GrantTTL: time.Hour})
		fmt.Println("201", err)
	case d.Outcome == quota.Denied:
		fmt.Println("429, retry after", d.Result.RetryAfter)
	case d.Outcome == quota.Replay:
		fmt.Println("200", string(d.Body))
	default: // Reused, InProgress
		fmt.Println("422 or 409:", d.Outcome)
	}
}

// A Spend timed out on the signer's side while Redis stalled, and the
// client had its 503. Its Cancel reached Redis first; the Spend, run when
// Redis resumed, finds the tombstone and takes nothing. The client's retry
// with the same Idempotency-Key is a new request with a nonce of its own,
// which the tombstone does not stop.
func ExampleStore_Cancel() {
	ctx := context.Background()
	q := quotatest.NewTwin(nil)
	now := time.Unix(1_700_000_000, 0)
	tenant, subject := "acme", keys.UserSubject("alice")
	first := quota.Ask{Tenant: tenant, Idem: keys.Idempotency(tenant, subject, "req-1"), Fingerprint: "fp", Nonce: "n1",
		Buckets: []bucket.Bucket{{Key: keys.Bucket(tenant, subject), Limit: bucket.Limit{Capacity: 30, Rate: 0.5}}}}

	refunded, _ := q.Cancel(ctx, now, first)
	fmt.Println("cancel refunded:", refunded)
	d, _ := q.Spend(ctx, now, first, 30*time.Second)
	fmt.Println("late spend:", d.Outcome)

	retry := first
	retry.Nonce = "n2"
	d, _ = q.Spend(ctx, now, retry, 30*time.Second)
	fmt.Println("retry:", d.Outcome, d.Result.Remaining, "left")
	// Output:
	// cancel refunded: false
	// late spend: cancelled
	// retry: allowed 29 left
}
