package multipart_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestCloserEndsEachWayOnce: the one protocol a DELETE and the sweeper
// share, on real Redis and versitygw. An open upload is aborted and owed
// (again on a retry, which finds it gone); a completed one is finished and
// its done marker written; a refunded grant is given back without a call
// to S3; a complete in progress makes it wait.
func TestCloserEndsEachWayOnce(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(t).Addr})
	store := quota.New(rdb)
	u := newUploads(t)
	cl := multipart.NewCloser(store, u, time.Now)
	urlID := func(up upload) string { return up.key[len("incoming/acme/"):] }

	open := start(t, u)
	open.put(1, 1024)
	for try := range 2 {
		got, err := cl.End(ctx, "acme", urlID(open), open.id)
		if err != nil || got.Closed != multipart.Owed || !got.Ended {
			t.Fatalf("end %d of an open upload: %+v %v, want owed", try, got, err)
		}
	}
	if got, _ := cl.End(ctx, "acme", urlID(open), open.id); got.Ending != multipart.AbortedBefore {
		t.Errorf("a second end: %v, want aborted before", got.Ending)
	}

	done := start(t, u)
	p := done.put(1, 1024)
	if _, err := u.Complete(ctx, done.key, done.id, 1024, []multipart.Part{p}); err != nil {
		t.Fatal(err)
	}
	got, err := cl.End(ctx, "acme", urlID(done), done.id)
	if err != nil || got.Closed != multipart.Finished {
		t.Fatalf("end of a completed upload: %+v %v, want finished", got, err)
	}
	if v := rdb.Get(ctx, keys.Done("acme", urlID(done))).Val(); v != quota.DoneUnpublished {
		t.Errorf("done marker %q, want %q", v, quota.DoneUnpublished)
	}
	if got, err := cl.End(ctx, "acme", urlID(done), done.id); err != nil || got.Closed != multipart.Finished || got.Ended {
		t.Errorf("end again: %+v %v, want finished without S3", got, err)
	}

	given := start(t, u)
	if _, err := store.Refund(ctx, time.Now(), []quota.Due{{Tenant: "acme", URLID: urlID(given)}}); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.End(ctx, "acme", urlID(given), given.id); err != nil || got.Closed != multipart.GivenBack || got.Ended {
		t.Errorf("end of a refunded grant: %+v %v, want given back without S3", got, err)
	}

	busy := start(t, u)
	if _, err := store.ClaimComplete(ctx, "acme", urlID(busy), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.End(ctx, "acme", urlID(busy), busy.id); err != nil || got.Closed != multipart.Busy || got.Wait <= 0 {
		t.Errorf("end while a complete holds the grant: %+v %v, want busy", got, err)
	}
}
