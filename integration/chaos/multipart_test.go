package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/mintgate/mintgate/api"
	"github.com/mintgate/mintgate/shared/keys"
)

// Multipart grants in the load. One request in mpEvery is a POST
// /uploads/multipart (charged as a sign, retried as a sign), of a small
// object: one part of a few KiB, or, rarely, a part of MinPartSize and a
// small last one. The seed then picks its fate: completed (its parts
// signed, PUT and completed, the complete retried as a real client would
// until it answers 200 or 410), abandoned (parts signed, some PUT, never
// completed: the sweeper aborts it after its life and refunds it) or
// aborted by its client (DELETE, retried until 204 or 409 not_abortable).
// The faults hit these requests as they hit signs: a killed signer's
// connections fail and are retried on the other.
const (
	mpEvery     = 5       // one request in mpEvery is a multipart create
	mpTwoEvery  = 25      // one multipart grant in mpTwoEvery has two parts
	mpPartBytes = 5 << 20 // MINTGATE_MULTIPART_PART_BYTES: S3's smallest part
	mpSmall     = 8 << 10 // the most bytes of a one-part object, and of a last part
	// maxContentLength is the largest contentLength any request of the
	// load asks (a two-part object; a single PUT asks at most maxSingle).
	maxContentLength = mpPartBytes + mpSmall
	// mpFateSpan bounds how long a client retries one complete or DELETE:
	// far above any fault's outage.
	mpFateSpan = 30 * time.Second
)

// filler is every part's bytes, shared read-only: a part of n bytes is
// its first n. It starts with the PNG the gate reads, so part 1, the
// object's start, makes the object a valid image/png (a part of 2 starts
// with it too, unread).
var filler = append(slices.Clip(pngHead), bytes.Repeat([]byte{'m'}, mpPartBytes+mpSmall-len(pngHead))...)

// mpFate is what a client does with a multipart grant.
type mpFate int

const (
	mpComplete mpFate = iota // sign every part, PUT it, complete
	mpAbandon                // sign the parts, PUT some, never complete
	mpAbort                  // PUT some parts, then DELETE
	numFates
)

var fateNames = [numFates]string{"completed", "abandoned", "aborted"}

func (f mpFate) String() string { return fateNames[f] }

// mpDraw is one multipart grant's requests, drawn before the first is
// sent, so that a seed repeats them whatever the answers.
type mpDraw struct {
	key    string
	size   int64
	fate   mpFate
	put    [2]bool // abandoned, aborted: which parts to PUT (completed: all)
	resume bool    // completed: name the parts GET /parts lists, not the PUTs' ETags
	replay bool    // create again with the same key while the grant lives
	// after: completed, a DELETE after the 200 (409 not_abortable);
	// aborted, a complete after the DELETE when every part is stored
	// (410 grant_closed).
	after bool
}

func (c *client) drawMultipart() mpDraw {
	d := mpDraw{key: fmt.Sprintf("c%d-m%d", c.id, c.mp.ops)}
	c.mp.ops++
	d.size = minBody + c.rng.Int64N(mpSmall-minBody+1)
	if c.rng.IntN(mpTwoEvery) == 0 {
		d.size += mpPartBytes
	}
	switch n := c.rng.IntN(4); n {
	case 0, 1:
		d.fate = mpComplete
	case 2:
		d.fate = mpAbandon
	default:
		d.fate = mpAbort
	}
	d.put = [2]bool{c.rng.IntN(2) == 0, c.rng.IntN(2) == 0}
	d.resume = c.rng.IntN(4) == 0
	d.replay = c.rng.IntN(10) == 0
	d.after = c.rng.IntN(5) == 0
	return d
}

// mpGrant is one multipart grant a client received, and what it did with
// it.
type mpGrant struct {
	tenant, user, key, urlID, uploadID, objKey string
	size                                       int64
	parts                                      int
	fate                                       mpFate
	askedAt, signedAt, expiresAt, endedAt      time.Time // the create sent, answered; the grant's expiry; its fate played
	signed                                     int       // parts whose URL came
	stored                                     int       // parts PUT and stored
	// The last answer to the complete and to the DELETE ("200", "410
	// grant_closed", "503 limiter_unavailable", "transport error"…); ""
	// when none was sent.
	complete, abort string
}

func (g mpGrant) completed() bool { return g.complete == "200" }

// ended reports whether the client's answers say its upload ended
// without an object: a DELETE's 204 or a complete's 410.
func (g mpGrant) ended() bool {
	return g.abort == "204" || strings.HasPrefix(g.complete, "410")
}

// ref is g as the markers are read: its tenant and urlId, its times.
func (g mpGrant) ref() received {
	return received{tenant: g.tenant, user: g.user, key: g.key, urlID: g.urlID, expiresAt: g.expiresAt, signedAt: g.signedAt}
}

// mpRecord is a client's multipart grants, and then everyone's.
type mpRecord struct {
	grants                  []mpGrant
	seen                    map[string]int // urlId → index in grants
	answers                 map[string]int // "create 201", "complete 410 grant_closed", "PUT part 200", …
	ops, abandoned, replays int            // creates (each with its retries), those that gave up, replays
}

func (r *mpRecord) merge(o mpRecord) {
	r.grants = append(r.grants, o.grants...)
	for k, v := range o.answers {
		r.answers[k] += v
	}
	r.ops += o.ops
	r.abandoned += o.abandoned
	r.replays += o.replays
}

func (r mpRecord) refs() []received {
	out := make([]received, len(r.grants))
	for i, g := range r.grants {
		out[i] = g.ref()
	}
	return out
}

// multipart creates one multipart grant for u and plays its fate. Once
// the grant came, its fate runs to its end even when the load stops.
func (c *client) multipart(ctx context.Context, u user, d mpDraw) {
	body := fmt.Sprintf(`{"contentType":"image/png","contentLength":%d}`, d.size)
	n := c.mp.ops
	create := func(until time.Time) (api.MultipartResponse, bool) {
		return charge(ctx, c, "/uploads/multipart", u, d.key, body, d.size, n, until,
			func(a string) { c.mp.answers["create "+a]++ }, func(g api.MultipartResponse) string { return g.URLID })
	}
	asked := time.Now()
	g, ok := create(time.Time{})
	if !ok {
		c.mp.abandoned++
		return
	}
	i := c.receiveMP(u, d, g)
	c.mp.grants[i].askedAt = asked
	if d.replay {
		c.mp.replays++
		if again, ok := create(g.ExpiresAt.Add(-time.Second)); ok {
			c.receiveMP(u, d, again)
		}
	}
	m := &c.mp.grants[i]
	until := time.Now().Add(mpFateSpan)
	switch d.fate {
	case mpComplete:
		parts := c.putParts(u, m, func(int) bool { return true })
		if len(parts) < m.parts {
			break // the grant's life ended first: the sweeper's
		}
		if d.resume {
			parts = c.listParts(u, m, parts, until)
		}
		m.complete = c.completeUpload(u, m, parts, until)
		if d.after && m.completed() {
			m.abort = c.abortUpload(u, m, until)
		}
	case mpAbandon:
		c.putParts(u, m, func(n int) bool { return d.put[n-1] })
	case mpAbort:
		parts := c.putParts(u, m, func(n int) bool { return d.put[n-1] })
		m.abort = c.abortUpload(u, m, until)
		if d.after && len(parts) == m.parts {
			m.complete = c.completeUpload(u, m, parts, until)
		}
	}
	m.endedAt = time.Now()
}

// receiveMP records a multipart grant the client got for d's key and
// returns its index.
func (c *client) receiveMP(u user, d mpDraw, g api.MultipartResponse) int {
	if !contains(c.keys[d.key], g.URLID) {
		c.keys[d.key] = append(c.keys[d.key], g.URLID)
	}
	if i, ok := c.mp.seen[g.URLID]; ok {
		return i
	}
	c.mp.grants = append(c.mp.grants, mpGrant{
		tenant: u.tenant, user: u.id, key: d.key, urlID: g.URLID, uploadID: g.UploadID, objKey: g.Key,
		size: d.size, parts: g.PartCount, fate: d.fate, signedAt: time.Now(), expiresAt: g.ExpiresAt,
	})
	c.mp.seen[g.URLID] = len(c.mp.grants) - 1
	return len(c.mp.grants) - 1
}

// putParts signs the parts which picks and PUTs each, and returns those
// stored, ascending, with the ETags their PUTs answered.
func (c *client) putParts(u user, m *mpGrant, which func(n int) bool) []api.CompletedPart {
	var ns []int
	for n := 1; n <= m.parts && n <= 2; n++ {
		if which(n) {
			ns = append(ns, n)
		}
	}
	if len(ns) == 0 {
		return nil
	}
	body, _ := json.Marshal(api.PartsRequest{PartNumbers: ns})
	// Part URLs are signed within the grant's life only.
	status, _, raw := c.retry("parts", http.MethodPost, "/uploads/"+m.urlID+"/parts", u, string(body), m.expiresAt)
	if status != http.StatusOK {
		return nil
	}
	var ps api.PartsResponse
	if err := json.Unmarshal(raw, &ps); err != nil || len(ps.Parts) != len(ns) {
		c.mp.answers["parts unreadable body"]++
		return nil
	}
	m.signed = len(ps.Parts)
	var done []api.CompletedPart
	for _, p := range ps.Parts {
		if etag, ok := c.putPart(p); ok {
			done = append(done, api.CompletedPart{PartNumber: p.PartNumber, ETag: etag})
			m.stored++
		}
	}
	return done
}

// putPart PUTs one part's bytes with the length it was signed for; a lost
// answer is sent again (a part's PUT replaces it).
func (c *client) putPart(p api.SignedPart) (etag string, ok bool) {
	n, err := strconv.ParseInt(p.Headers.ContentLength, 10, 64)
	if err != nil || n < 1 || n > int64(len(filler)) {
		c.mp.answers["PUT part bad Content-Length"]++
		return "", false
	}
	for range 3 {
		req, err := http.NewRequest(p.Method, p.URL, bytes.NewReader(filler[:n]))
		if err != nil {
			return "", false
		}
		resp, err := c.http.Do(req)
		if err != nil {
			c.mp.answers["PUT part transport error"]++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.mp.answers[fmt.Sprintf("PUT part %d", resp.StatusCode)]++
		if resp.StatusCode == http.StatusOK && resp.Header.Get("ETag") != "" {
			return resp.Header.Get("ETag"), true
		}
		return "", false
	}
	return "", false
}

// listParts is the parts to complete as GET /parts lists them, as a
// client resuming would name them; stored when the list does not answer
// or misses one.
func (c *client) listParts(u user, m *mpGrant, stored []api.CompletedPart, until time.Time) []api.CompletedPart {
	status, _, raw := c.retry("list", http.MethodGet, "/uploads/"+m.urlID+"/parts", u, "", until)
	var pl api.PartList
	if status != http.StatusOK || json.Unmarshal(raw, &pl) != nil || len(pl.Parts) != len(stored) {
		return stored
	}
	out := make([]api.CompletedPart, len(pl.Parts))
	for i, p := range pl.Parts {
		out[i] = api.CompletedPart{PartNumber: p.PartNumber, ETag: p.ETag}
	}
	return out
}

// completeUpload completes m from parts, retried until 200 or 410 (or
// another final answer), and returns the last answer.
func (c *client) completeUpload(u user, m *mpGrant, parts []api.CompletedPart, until time.Time) string {
	body, _ := json.Marshal(api.CompleteRequest{Parts: parts})
	_, a, _ := c.retry("complete", http.MethodPost, "/uploads/"+m.urlID+"/complete", u, string(body), until)
	return a
}

// abortUpload DELETEs m, retried until 204 or 409 not_abortable (or
// another final answer), and returns the last answer.
func (c *client) abortUpload(u user, m *mpGrant, until time.Time) string {
	_, a, _ := c.retry("delete", http.MethodDelete, "/uploads/"+m.urlID, u, "", until)
	return a
}

// retry sends one multipart request until its answer is final or until
// passes: no answer, a 503 and a 409 request_in_progress are sent again
// after a backoff (a 409's Retry-After at most maxBackoff), to the
// signers in turn. It returns the last answer, as tallied ("transport
// error", status 0, when none came), and its body.
func (c *client) retry(step, method, path string, u user, body string, until time.Time) (int, string, []byte) {
	backoff := firstBackoff
	for attempt := 0; ; attempt++ {
		status, raw, err := c.call((c.id+c.mp.ops+attempt)%len(c.st.signers), method, path, u, body)
		a := "transport error"
		if err == nil {
			a = answerOf(status, raw)
		} else {
			status = 0
		}
		c.mp.answers[step+" "+a]++
		if err == nil && status != http.StatusServiceUnavailable && a != "409 request_in_progress" {
			return status, a, raw
		}
		if time.Now().Add(backoff).After(until) {
			return status, a, raw
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

// call sends one multipart request but a create to signer i. It spends
// nothing, so it is not counted in the signer's flight.
func (c *client) call(i int, method, path string, u user, body string) (int, []byte, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.st.signers[i].URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// mpOutcome is what Redis and S3 say became of one multipart grant.
type mpOutcome struct {
	outcome
	object     bool  // its key exists
	objectSize int64 // and holds that many bytes
	open       bool  // S3 lists its upload as in progress
}

// mpOutcomes reads every multipart grant's markers, then S3: a HEAD of
// its key, and whether its upload is still listed. It also returns how
// many uploads S3 holds open that no grant received names (creates cut
// before their answer, left to the bucket's lifecycle rule).
func (st *stack) mpOutcomes(ctx context.Context, gs []mpGrant) ([]mpOutcome, int, error) {
	refs := make([]received, len(gs))
	for i, g := range gs {
		refs[i] = g.ref()
	}
	marks, err := st.outcomes(ctx, refs)
	if err != nil {
		return nil, 0, err
	}
	out := make([]mpOutcome, len(gs))
	for i := range out {
		out[i].outcome = marks[i]
	}
	client := st.s3.Client()
	open := map[string]bool{} // upload ids
	p := s3.NewListMultipartUploadsPaginator(client, &s3.ListMultipartUploadsInput{Bucket: aws.String(st.s3.Bucket), Prefix: aws.String(keys.ObjectPrefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("list multipart uploads: %w", err)
		}
		for _, up := range page.Uploads {
			open[aws.ToString(up.UploadId)] = true
		}
	}
	orphans := len(open)
	for i, g := range gs {
		if open[g.uploadID] {
			out[i].open = true
			orphans--
		}
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
	)
	for i, g := range gs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			size, ok, err := head(ctx, client, st.s3.Bucket, g.objKey)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			out[i].object, out[i].objectSize = ok, size
		})
	}
	wg.Wait()
	return out, orphans, errors.Join(errs...)
}

// head reports whether key exists, and its size.
func head(ctx context.Context, client *s3.Client, bucket, key string) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err == nil {
		return aws.ToInt64(out.ContentLength), true, nil
	}
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() == http.StatusNotFound {
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("head %s: %w", key, err)
}

// checkMultipart: every multipart grant received ends exactly one way.
// Completed: its object exists, of its size, its done marker set, and no
// refund stands (no refunded marker, or one taken back). Or ended without
// an object: no done marker, its upload gone from S3 and its refund
// standing, once (the refunded marker). And as its client was told: a
// complete's 200 and a DELETE's 409 not_abortable say completed, a
// DELETE's 204 and a complete's 410 say ended.
func (r *report) checkMultipart(res result, outs []mpOutcome, orphans int) {
	var refunded, lost, open, markers, told int
	for i, g := range res.mp.grants {
		o := outs[i]
		if o.refundStands() && (o.object || g.completed()) {
			refunded++
			r.mpExample("multipart completed, refunded", g, o)
		}
		if !o.object && !o.refundStands() {
			lost++
			r.mpExample("multipart ended without object, not refunded", g, o)
		}
		if o.open {
			open++
			r.mpExample("multipart upload left open in S3", g, o)
		}
		if o.done != o.object || (o.object && o.objectSize != g.size) {
			markers++
			r.mpExample("multipart done marker and object disagree", g, o)
		}
		if ((g.completed() || g.abort == "409 not_abortable") && !o.object) || (g.ended() && o.object) {
			told++
			r.mpExample("multipart answers and end disagree", g, o)
		}
	}
	r.add("multipart completed, refunded", fmt.Sprint(refunded), "0", refunded == 0)
	r.add("multipart ended without object, not refunded (lost refunds)", fmt.Sprint(lost), "0", lost == 0)
	r.add("multipart uploads left open in S3", fmt.Sprintf("%d of grants received (%d of creates none received)", open, orphans), "0 of grants received", open == 0)
	r.add("multipart done marker ⇔ object of its size", fmt.Sprintf("%d disagree", markers), "0", markers == 0)
	r.add("multipart answers agree with the end", fmt.Sprintf("%d disagree", told), "0 (200, 409 ⇒ object; 204, 410 ⇒ none)", told == 0)
}

// summarizeMultipart writes the multipart grants' numbers above the table.
func (r *report) summarizeMultipart(res result, outs []mpOutcome) {
	var two, objects, refunded, takenBack, stored int
	var fates [numFates]int
	var creates []time.Duration
	var played [numFates][]time.Duration
	completes := map[string]int{}
	aborts := map[string]int{}
	for i, g := range res.mp.grants {
		o := outs[i]
		fates[g.fate]++
		creates = append(creates, g.signedAt.Sub(g.askedAt))
		played[g.fate] = append(played[g.fate], g.endedAt.Sub(g.signedAt))
		if g.parts > 1 {
			two++
		}
		stored += g.stored
		if o.object {
			objects++
		}
		if o.refunded {
			refunded++
		}
		if o.takenBack {
			takenBack++
		}
		switch g.fate {
		case mpComplete:
			a := g.complete
			if a == "" {
				a = "not sent"
			}
			completes[a]++
		case mpAbort:
			aborts[g.abort]++
		}
	}
	r.summary = append(r.summary,
		fmt.Sprintf("multipart: %d creates (%d replays), %d grants received (%d of two parts), %d creates gave up; %d parts stored; "+
			"%d to complete (%s), %d abandoned, %d to abort (%s)",
			res.mp.ops, res.mp.replays, len(res.mp.grants), two, res.mp.abandoned, stored,
			fates[mpComplete], answers(completes), fates[mpAbandon], fates[mpAbort], answers(aborts)),
		fmt.Sprintf("multipart ends: %d objects, %d refunded markers, %d refunds taken back", objects, refunded, takenBack),
		"multipart answers: "+answers(res.mp.answers),
		fmt.Sprintf("multipart times: create %s; then completed %s, abandoned %s, aborted %s",
			spread(creates), spread(played[mpComplete]), spread(played[mpAbandon]), spread(played[mpAbort])),
	)
}

// mpExample records g as a case of the failure what, with its timeline.
func (r *report) mpExample(what string, g mpGrant, o mpOutcome) {
	r.addExample(what, func(at func(time.Time) string) string {
		return fmt.Sprintf(
			"%s upload %s (tenant %s, user %s, key %s): %s, %d bytes in %d parts (%d signed, %d stored); created %s, expires %s, due %s, client done %s; "+
				"complete %q, delete %q; object %v (%d bytes), upload open %v; done marker %v %q set %s, refunded %v at %s (taken back %v)",
			g.urlID, g.uploadID, g.tenant, g.user, g.key, g.fate, g.size, g.parts, g.signed, g.stored,
			at(g.signedAt), at(g.expiresAt), at(g.expiresAt.Add(r.grace)), at(g.endedAt),
			g.complete, g.abort, o.object, o.objectSize, o.open, o.done, o.value, at(o.doneAt), o.refunded, at(o.refundedAt), o.takenBack)
	})
}
