package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// A DELETE never multiplies creates (SPEC §9): alice's bucket holds 3 and
// does not refill during the test, so of 8 create + DELETE cycles exactly
// the first 3 create, and the rest are the 429 of a spent bucket, however
// many uploads she aborted. Each DELETE still answers 204 and ends the
// upload in S3. Her grants charged no bytes: a DELETE gives back nothing,
// and the sweeper's refund at their due time finds them given back.
func TestAbortNeverMultipliesCreates(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	caller := keys.Bucket("acme", keys.UserSubject("alice"))
	var ids []string
	for i := range 8 {
		r := s.create(alice, newKey(), 12*mib)
		if r.status != http.StatusCreated {
			mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
			if r.str("scope") != ratelimit.ScopeCaller {
				t.Fatalf("create %d: 429 %s, want scope caller", i+1, r.raw)
			}
			continue
		}
		ids = append(ids, r.str("urlId"))
		if d := s.abort(alice, r.str("urlId")); d.status != http.StatusNoContent {
			t.Fatalf("DELETE %d: %d %s", i+1, d.status, d.raw)
		}
		if n := s.uploads(r.str("key")); n != 0 {
			t.Fatalf("S3 still holds %d uploads of aborted grant %d", n, i+1)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d of 8 create + DELETE cycles created an upload, want 3 (the bucket's capacity)", len(ids))
	}
	if got := s.count(caller); got != 0 {
		t.Fatalf("after 3 creates and 3 DELETEs alice holds %v tokens, want 0", got)
	}
	sweepDue(t, s, ids)
	if got := s.count(caller); got != 0 {
		t.Fatalf("after the sweeper's pass alice holds %v tokens, want 0", got)
	}
	// Without tiers of bytes a DELETE's refund names no bucket: it only
	// ends the grant.
	for _, id := range ids {
		v := s.rdb.Get(context.Background(), keys.Refunded("acme", id)).Val()
		if bs, err := quota.ParseRefundRecord("acme", v); err != nil || len(bs) != 0 {
			t.Fatalf("refunded marker of %s: %q (%v), want a record of no buckets", id, v, err)
		}
	}
}

// sweepDue runs the sweeper's refund of each grant of ids at its due time
// (life and grace past): what its refundAll runs, quota.Store.Refund with
// every bucket the create charged, which its ledger grant's credits name.
// Each DELETEd grant must answer already (credit nothing) and still read
// aborted.
func sweepDue(t *testing.T, s *mpSigner, ids []string) {
	t.Helper()
	store := quota.New(s.rdb)
	due := s.clock.Now().Add(time.Hour + time.Minute)
	for i, id := range ids {
		outs, err := store.Refund(context.Background(), due, []quota.Due{{Tenant: "acme", URLID: id, Buckets: chargedBuckets(t, s, id)}})
		if err != nil {
			t.Fatal(err)
		}
		if outs[0] != quota.Already {
			t.Fatalf("the sweeper's refund of DELETEd grant %d: %s, want already", i+1, outs[0])
		}
		if st := s.status(s.token("acme", "alice"), id); st != statusAborted {
			t.Fatalf("after the sweeper's pass grant %d reads %q, want aborted", i+1, st)
		}
	}
}

// abortBytesTiers: 3 creates, and 10 MiB, per caller; neither refills
// during a test (the signer's clock stands still).
const abortBytesTiers = "anonymous=5:5/60s,user=3:0.001,tenant=100:0.001,user_bytes=10MiB:1KiB/1h,tenant_bytes=100MiB:1KiB/1h"

// With byte tiers a DELETE gives the grant's bytes back at once, and only
// them: each 6 MiB create fits again after the DELETE of the one before
// (10 MiB would not hold two), while the token of each stays spent, so
// the fourth create is refused for requests, not bytes. After each
// grant's life and grace the sweeper's refund of it (the same script, with
// every bucket the create charged) finds it given back and credits
// nothing: no bucket ends above what the DELETEs gave.
func TestAbortGivesBackTheBytesNotTheToken(t *testing.T) {
	s := startMultipart(t, map[string]string{"MINTGATE_TIERS": abortBytesTiers})
	alice := s.token("acme", "alice")
	caller := keys.Bucket("acme", keys.UserSubject("alice"))
	callerBytes, tenantBytes := keys.ByteBucket("acme", keys.UserSubject("alice")), keys.TenantByteBucket("acme")
	var ids []string
	for i := range 3 {
		r := s.create(alice, newKey(), 6*mib)
		if r.status != http.StatusCreated {
			t.Fatalf("create %d of 6 MiB after %d DELETEs: %d %s", i+1, i, r.status, r.raw)
		}
		id := r.str("urlId")
		ids = append(ids, id)
		if got := s.count(callerBytes); got != 4*mib {
			t.Fatalf("after create %d alice holds %v bytes, want 4 MiB", i+1, got)
		}
		if d := s.abort(alice, id); d.status != http.StatusNoContent {
			t.Fatalf("DELETE %d: %d %s", i+1, d.status, d.raw)
		}
		if got := s.count(callerBytes); got != 10*mib {
			t.Fatalf("after DELETE %d alice holds %v bytes, want her 10 MiB back", i+1, got)
		}
		if got := s.count(tenantBytes); got != 100*mib {
			t.Fatalf("after DELETE %d the tenant holds %v bytes, want its 100 MiB back", i+1, got)
		}
		if got, want := s.count(caller), float64(2-i); got != want {
			t.Fatalf("after DELETE %d alice holds %v tokens, want %v (a create's token is not given back)", i+1, got, want)
		}
		if st := s.status(alice, id); st != statusAborted {
			t.Fatalf("grant %d reads %q, want aborted", i+1, st)
		}
	}
	r := s.create(alice, newKey(), 6*mib)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeCaller {
		t.Fatalf("fourth create: 429 %s, want scope caller (requests), not bytes", r.raw)
	}

	before := map[string]float64{}
	for _, k := range []string{caller, callerBytes, tenantBytes, keys.TenantBucket("acme")} {
		before[k] = s.count(k)
	}
	sweepDue(t, s, ids)
	for k, v := range before {
		if got := s.count(k); got != v {
			t.Fatalf("after the sweeper's pass %s holds %v, want %v (nothing more given back)", k, got, v)
		}
	}
}

// chargedBuckets are the buckets grant id's create charged, from its grant
// record: the shapes and units its ledger grant's credits carry too.
func chargedBuckets(t *testing.T, s *mpSigner, id string) []bucket.Bucket {
	t.Helper()
	raw, err := s.rdb.HGet(context.Background(), keys.Grant("acme", id), "multipart").Result()
	if err != nil {
		t.Fatal(err)
	}
	var rec mpRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		t.Fatal(err)
	}
	bs, err := quota.ParseRefundRecord("acme", rec.Refund)
	if err != nil {
		t.Fatal(err)
	}
	return bs
}
