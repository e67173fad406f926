package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// putPart PUTs body to a signed part with the headers the signer named,
// and returns S3's status, body and ETag.
func putPart(t *testing.T, p api.SignedPart, body []byte) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(p.Method, p.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if p.Headers.ChecksumSHA256 != "" {
		req.Header.Set("x-amz-checksum-sha256", p.Headers.ChecksumSHA256)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header.Get("ETag")
}

// Issue 30: a multipart grant created with checksumAlgorithm SHA256 signs
// each part with its checksum. On a real versitygw: a part asked for
// without one is 400 checksum_required, a part of other bytes is refused
// (400 BadDigest), the right parts list with their checksums and complete.
func TestChecksummedMultipartTakesItsPartsBytesOnly(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	h := bearer(alice)
	h[request.HeaderIdempotencyKey] = newKey()
	g := s.do(http.MethodPost, "/uploads/multipart", h, fmt.Sprintf(`{"contentType":"image/png","contentLength":%d,"checksumAlgorithm":"SHA256"}`, 12*mib))
	if g.status != http.StatusCreated {
		t.Fatalf("create: %d %s", g.status, g.raw)
	}
	id, key := g.str("urlId"), g.str("key")
	bodies := [][]byte{bytes.Repeat([]byte{1}, 5*mib), bytes.Repeat([]byte{2}, 5*mib), bytes.Repeat([]byte{3}, 2*mib)}

	if r := s.parts(alice, id, 1, 2, 3); r.status != http.StatusBadRequest || r.code() != apierr.CodeChecksumRequired {
		t.Fatalf("parts by number alone: %d %s, want 400 %s", r.status, r.raw, apierr.CodeChecksumRequired)
	}
	noSum, _ := json.Marshal(api.PartsRequest{Parts: []api.PartChecksum{{PartNumber: 1, ChecksumSHA256: sha256Of(bodies[0])}, {PartNumber: 2}}})
	if r := s.do(http.MethodPost, "/uploads/"+id+"/parts", bearer(alice), string(noSum)); r.status != http.StatusBadRequest || r.code() != apierr.CodeChecksumRequired {
		t.Fatalf("a part without its checksum: %d %s, want 400 %s", r.status, r.raw, apierr.CodeChecksumRequired)
	}
	ask := api.PartsRequest{}
	for i, b := range bodies {
		ask.Parts = append(ask.Parts, api.PartChecksum{PartNumber: i + 1, ChecksumSHA256: sha256Of(b)})
	}
	raw, _ := json.Marshal(ask)
	ps := signed(t, s.do(http.MethodPost, "/uploads/"+id+"/parts", bearer(alice), string(raw)))

	wrong := bytes.Repeat([]byte{9}, 5*mib)
	if code, body, _ := putPart(t, ps[0], wrong); code != http.StatusBadRequest || !strings.Contains(body, "BadDigest") {
		t.Fatalf("part 1 of other bytes: %d %s, want 400 BadDigest", code, body)
	}
	var done []api.CompletedPart
	for i, p := range ps {
		if p.Headers.ChecksumSHA256 != ask.Parts[i].ChecksumSHA256 || !strings.Contains(p.URL, "x-amz-checksum-sha256") {
			t.Fatalf("part %d: headers %+v, URL %s: the checksum is not signed", p.PartNumber, p.Headers, p.URL)
		}
		code, body, etag := putPart(t, p, bodies[i])
		if code != http.StatusOK {
			t.Fatalf("part %d: %d %s", p.PartNumber, code, body)
		}
		done = append(done, api.CompletedPart{PartNumber: p.PartNumber, ETag: etag})
	}
	var list api.PartList
	if r := s.do(http.MethodGet, "/uploads/"+id+"/parts", bearer(alice), ""); r.status != http.StatusOK || json.Unmarshal(r.raw, &list) != nil {
		t.Fatalf("list: %d %s", r.status, r.raw)
	}
	for i, p := range list.Parts {
		if p.ChecksumSHA256 != ask.Parts[i].ChecksumSHA256 {
			t.Errorf("listed part %d: checksum %q, want %s", p.PartNumber, p.ChecksumSHA256, ask.Parts[i].ChecksumSHA256)
		}
	}
	if c := s.complete(alice, id, done); c.status != http.StatusOK {
		t.Fatalf("complete: %d %s", c.status, c.raw)
	}
	if n := s.head(key); n != 12*mib {
		t.Fatalf("the object holds %d bytes, want 12 MiB", n)
	}
}

// A grant created without checksumAlgorithm takes the old request form
// and the new one without checksums, and refuses a checksum for its parts.
func TestUnchecksummedMultipartKeepsItsParts(t *testing.T) {
	s := startMultipart(t, nil)
	alice := s.token("acme", "alice")
	g := s.create(alice, newKey(), 12*mib)
	if g.status != http.StatusCreated {
		t.Fatalf("create: %d %s", g.status, g.raw)
	}
	id := g.str("urlId")
	if ps := signed(t, s.parts(alice, id, 1)); ps[0].Headers.ChecksumSHA256 != "" {
		t.Errorf("an unchecksummed part names a checksum: %+v", ps[0].Headers)
	}
	if ps := signed(t, s.do(http.MethodPost, "/uploads/"+id+"/parts", bearer(alice), `{"parts":[{"partNumber":2}]}`)); len(ps) != 1 || ps[0].PartNumber != 2 {
		t.Errorf("parts form without checksums: %+v", ps)
	}
	for _, body := range []string{
		fmt.Sprintf(`{"parts":[{"partNumber":1,"checksumSHA256":%q}]}`, sha256Of([]byte("x"))),
		`{"partNumbers":[1],"parts":[{"partNumber":1}]}`,
	} {
		if r := s.do(http.MethodPost, "/uploads/"+id+"/parts", bearer(alice), body); r.status != http.StatusBadRequest || r.code() != apierr.CodeInvalidRequest {
			t.Errorf("%s: %d %s, want 400 invalid_request", body, r.status, r.raw)
		}
	}
	h := bearer(alice)
	h[request.HeaderIdempotencyKey] = newKey()
	for _, body := range []string{
		fmt.Sprintf(`{"contentType":"image/png","contentLength":%d,"checksumAlgorithm":"MD5"}`, 12*mib),
		fmt.Sprintf(`{"contentType":"image/png","contentLength":%d,"checksumSHA256":%q}`, 12*mib, sha256Of([]byte("x"))),
	} {
		if r := s.do(http.MethodPost, "/uploads/multipart", h, body); r.status != http.StatusBadRequest || r.code() != apierr.CodeInvalidRequest {
			t.Errorf("create %s: %d %s, want 400 invalid_request", body, r.status, r.raw)
		}
	}
}
