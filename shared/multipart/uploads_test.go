package multipart_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/mintgate/mintgate/shared/multipart"
	"github.com/mintgate/mintgate/shared/testenv"
)

func TestLayout(t *testing.T) {
	l := multipart.Layout{Size: 12 << 20, PartSize: 5 << 20}
	if l.Count() != 3 || l.PartLen(1) != 5<<20 || l.PartLen(3) != 2<<20 || l.PartLen(0) != 0 || l.PartLen(4) != 0 {
		t.Errorf("12 MiB in 5 MiB parts: %d parts, lengths %d %d %d", l.Count(), l.PartLen(1), l.PartLen(2), l.PartLen(3))
	}
	exact := multipart.Layout{Size: 10 << 20, PartSize: 5 << 20}
	if exact.Count() != 2 || exact.PartLen(2) != 5<<20 {
		t.Errorf("10 MiB in 5 MiB parts: %d parts, last %d", exact.Count(), exact.PartLen(2))
	}
	for _, bad := range []multipart.Layout{
		{Size: 0, PartSize: 5 << 20},
		{Size: 1, PartSize: 4 << 20},
		{Size: 10001 * (5 << 20), PartSize: 5 << 20},
	} {
		if err := bad.Check(); !errors.Is(err, multipart.ErrLayout) {
			t.Errorf("%+v: %v, want ErrLayout", bad, err)
		}
	}
}

// upload is one multipart upload on a real versitygw.
type upload struct {
	t       *testing.T
	u       *multipart.Uploads
	key, id string
}

func newUploads(t *testing.T) *multipart.Uploads {
	t.Helper()
	v := testenv.StartVersityGW(t, "")
	return multipart.New(v.Client(), v.Bucket)
}

func start(t *testing.T, u *multipart.Uploads) upload {
	t.Helper()
	key := "incoming/acme/" + uuid.NewString()
	id, err := u.Create(context.Background(), key, "video/mp4", false)
	if err != nil {
		t.Fatal(err)
	}
	return upload{t: t, u: u, key: key, id: id}
}

// put uploads part n of size bytes through its presigned URL and returns
// the part as a complete names it.
func (up upload) put(n int, size int64) multipart.Part {
	up.t.Helper()
	p, err := up.u.SignPart(context.Background(), up.key, up.id, n, size, "", 60e9)
	if err != nil {
		up.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, p.URL, bytes.NewReader(make([]byte, size)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		up.t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		up.t.Fatalf("PUT part %d: %d %s", n, res.StatusCode, body)
	}
	return multipart.Part{Number: n, ETag: res.Header.Get("ETag")}
}

// A complete checks the parts against what S3 holds and the declared size:
// short of it nothing is created and the upload stays open; a retry after
// success answers the same; an abort after it finds it completed.
func TestCompleteChecksTheTotal(t *testing.T) {
	u := newUploads(t)
	ctx := context.Background()
	up := start(t, u)
	parts := []multipart.Part{up.put(1, 5<<20), up.put(2, 5<<20), up.put(3, 2<<20)}

	if _, err := u.Complete(ctx, up.key, up.id, 12<<20, parts[:2]); !errors.Is(err, multipart.ErrSizeMismatch) {
		t.Fatalf("complete of 10 of 12 MiB: %v, want ErrSizeMismatch", err)
	}
	if _, ok, err := u.Head(ctx, up.key); err != nil || ok {
		t.Fatalf("after the refused complete the object exists (%v, %v)", ok, err)
	}
	wrong := append([]multipart.Part(nil), parts...)
	wrong[1].ETag = `"00000000000000000000000000000000"`
	if _, err := u.Complete(ctx, up.key, up.id, 12<<20, wrong); !errors.Is(err, multipart.ErrInvalidPart) {
		t.Fatalf("complete with a wrong ETag: %v, want ErrInvalidPart", err)
	}
	listed, err := u.List(ctx, up.key, up.id)
	if err != nil || len(listed) != 3 || listed[2].Size != 2<<20 {
		t.Fatalf("list: %+v %v", listed, err)
	}
	for range 2 {
		size, err := u.Complete(ctx, up.key, up.id, 12<<20, parts)
		if err != nil || size != 12<<20 {
			t.Fatalf("complete: %d %v", size, err)
		}
	}
	if size, ok, err := u.Head(ctx, up.key); err != nil || !ok || size != 12<<20 {
		t.Fatalf("object: %d %v %v, want 12 MiB", size, ok, err)
	}
	if e, err := u.End(ctx, up.key, up.id); err != nil || e != multipart.Completed {
		t.Fatalf("end after complete: %v %v, want completed", e, err)
	}
	if _, err := u.List(ctx, up.key, up.id); !errors.Is(err, multipart.ErrGone) {
		t.Fatalf("list after complete: %v, want ErrGone", err)
	}
}

// End aborts an open upload once; a second End finds it gone and its object
// absent, and a complete after it fails with ErrGone.
func TestEndAborts(t *testing.T) {
	u := newUploads(t)
	ctx := context.Background()
	up := start(t, u)
	part := up.put(1, 1000)
	if e, err := u.End(ctx, up.key, up.id); err != nil || e != multipart.Aborted {
		t.Fatalf("end: %v %v, want aborted", e, err)
	}
	if e, err := u.End(ctx, up.key, up.id); err != nil || e != multipart.AbortedBefore {
		t.Fatalf("end again: %v %v, want gone", e, err)
	}
	if _, err := u.Complete(ctx, up.key, up.id, 1000, []multipart.Part{part}); !errors.Is(err, multipart.ErrGone) {
		t.Fatalf("complete after the abort: %v, want ErrGone", err)
	}
}

func TestSignPartSignsTheLength(t *testing.T) {
	u := newUploads(t)
	up := start(t, u)
	p, err := u.SignPart(context.Background(), up.key, up.id, 1, 1000, "", 60e9)
	if err != nil {
		t.Fatal(err)
	}
	// A body longer than signed: small enough that the gateway's early
	// answer is read whole.
	req, _ := http.NewRequest(http.MethodPut, p.URL, bytes.NewReader(make([]byte, 1001)))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("PUT of 1001 bytes on a URL signed for 1000: %d, want 403", res.StatusCode)
	}
	if p.ContentLength != 1000 || !bytes.Contains([]byte(p.URL), []byte("partNumber=1")) {
		t.Errorf("signed part %+v", p)
	}
}
