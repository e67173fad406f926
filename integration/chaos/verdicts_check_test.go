package chaos

import (
	"bytes"
	"image"
	"net/http"
	"slices"
	"testing"
	"time"
)

// The load's bodies are what the gate reads: a right one a PNG header the
// image decoders accept, of its declared size; a wrong one HTML, which no
// image decoder reads.
func TestBodies(t *testing.T) {
	for _, size := range []int64{minBody, maxSingle, mpSmall} {
		b := body(size, false)
		if int64(len(b)) != size {
			t.Fatalf("body of %d bytes is %d", size, len(b))
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || format != "png" || cfg.Width != 2 || cfg.Height != 2 {
			t.Fatalf("PNG body of %d bytes: %v %s %dx%d", size, err, format, cfg.Width, cfg.Height)
		}
		w := body(size, true)
		if int64(len(w)) != size || !bytes.HasPrefix(w, []byte("<!doctype html>")) {
			t.Fatalf("HTML body of %d bytes: %q…", size, w[:20])
		}
		if _, _, err := image.DecodeConfig(bytes.NewReader(w)); err == nil {
			t.Fatalf("HTML body of %d bytes reads as an image", size)
		}
	}
	if !bytes.HasPrefix(filler, pngHead) || len(filler) != mpPartBytes+mpSmall {
		t.Fatalf("the multipart filler does not start with the PNG, or is %d bytes", len(filler))
	}
}

// The verdict rows: wrong bytes end rejected:type_mismatch, encoded ones
// rejected:encoding_not_allowed, in quarantine, never refunded; right bytes
// end completed; a re-PUT after rejection neither stays in incoming/ nor
// replaces the quarantined object; no urlId has both events; no marker is
// left between two values.
func TestVerdictRows(t *testing.T) {
	now := time.Now()
	const id = "id"
	right := received{tenant: "t0", user: "u000", urlID: id, size: 100, expiresAt: now, uploaded: true}
	wrong := right
	wrong.wrong = true
	encoded := right
	encoded.encoding = "br"
	reput := wrong
	reput.reput = http.StatusOK
	completed := outcome{done: true, value: "1"}
	rejected := outcome{done: true, value: "rejected:type_mismatch"}
	inQuarantine := map[string]bool{id: true}
	completedEvent := map[string]*urlEvents{id: {completed: 1}}
	rejectedEvent := map[string]*urlEvents{id: {rejected: 1, reason: "type_mismatch"}}
	for _, c := range []struct {
		name string
		u    received
		o    outcome
		v    verdicts
		fail []string // the rows that fail
	}{
		{"right, completed", right, completed, verdicts{events: completedEvent}, nil},
		{"wrong, rejected", wrong, rejected, verdicts{events: rejectedEvent, quarantined: inQuarantine}, nil},
		{"wrong, never uploaded", func() received { u := wrong; u.uploaded = false; return u }(), outcome{refunded: true}, verdicts{}, nil},
		{"wrong, rejected, refund taken back", wrong, outcome{done: true, value: "rejected:type_mismatch", refunded: true, takenBack: true},
			verdicts{events: rejectedEvent, quarantined: inQuarantine}, nil},
		{"wrong, completed", wrong, completed, verdicts{events: completedEvent},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)"}},
		{"wrong, rejected for another reason", wrong, outcome{done: true, value: "rejected:size_mismatch"}, verdicts{quarantined: inQuarantine},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)"}},
		{"wrong, rejected, a completed event too", wrong, rejected,
			verdicts{events: map[string]*urlEvents{id: {completed: 1, rejected: 1}}, quarantined: inQuarantine},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)", "completed and rejected (urlIds with both events)"}},
		{"right, rejected", right, rejected, verdicts{events: rejectedEvent, quarantined: inQuarantine}, []string{"right bytes rejected"}},
		{"right, completed, a rejected event", right, completed, verdicts{events: rejectedEvent}, []string{"right bytes rejected"}},
		{"wrong, rejected and refunded", wrong, outcome{done: true, value: "rejected:type_mismatch", refunded: true},
			verdicts{events: rejectedEvent, quarantined: inQuarantine},
			[]string{"every URL received ends done xor refunded", "no uploaded URL refunded", "rejected and refunded"}},
		{"wrong, rejected, still in incoming", wrong, rejected, verdicts{events: rejectedEvent},
			[]string{"rejected, not in quarantine only (of its size, gone from incoming/)"}},
		{"encoded, rejected", encoded, outcome{done: true, value: "rejected:encoding_not_allowed"},
			verdicts{events: map[string]*urlEvents{id: {rejected: 1, reason: "encoding_not_allowed"}}, quarantined: inQuarantine}, nil},
		{"encoded, completed", encoded, completed, verdicts{events: completedEvent},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)"}},
		{"wrong and encoded, rejected as wrong bytes", func() received { u := encoded; u.wrong = true; return u }(), rejected,
			verdicts{events: rejectedEvent, quarantined: inQuarantine},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)"}},
		{"wrong, re-PUT removed", reput, rejected, verdicts{events: rejectedEvent, quarantined: inQuarantine}, nil},
		{"wrong, re-PUT left in incoming", reput, rejected, verdicts{events: rejectedEvent},
			[]string{"rejected, not in quarantine only (of its size, gone from incoming/)"}},
		{"wrong, re-PUT over the quarantined object", reput, rejected,
			verdicts{events: rejectedEvent, quarantined: inQuarantine, overwritten: map[string]bool{id: true}},
			[]string{"re-PUT after rejection over the quarantined object (second PUTs S3 took)"}},
		{"right, still verifying", right, outcome{done: true, value: "verifying"}, verdicts{},
			[]string{"verdicts left in between after the settle time"}},
		{"right, verified, no event yet", right, outcome{done: true, value: "verified"}, verdicts{},
			[]string{"verdicts left in between after the settle time"}},
		{"wrong, rejecting", wrong, outcome{done: true, value: "rejecting:type_mismatch"}, verdicts{quarantined: inQuarantine},
			[]string{"wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)", "verdicts left in between after the settle time"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &report{origin: now}
			res := result{urls: []received{c.u}}
			r.checkURLs(res, []outcome{c.o})
			r.checkVerdicts(res, []outcome{c.o}, nil, c.v)
			var failed []string
			for _, x := range r.rows {
				if !x.ok {
					failed = append(failed, x.name)
				}
			}
			if !slices.Equal(failed, c.fail) {
				t.Fatalf("failed rows %q, want %q", failed, c.fail)
			}
		})
	}
}

// A multipart object is right bytes: rejected, it fails, and the bucket
// tally counts it as uploaded (its object lies in quarantine).
func TestVerdictRowsMultipart(t *testing.T) {
	g := mpGrant{tenant: "t0", user: "u000", urlID: "id", size: 10, parts: 1, expiresAt: time.Now(), complete: "200"}
	o := mpOutcome{outcome: outcome{done: true, value: "rejected:type_mismatch"}}
	r := &report{}
	r.checkVerdicts(result{mp: mpRecord{grants: []mpGrant{g}}}, nil, []mpOutcome{o},
		verdicts{events: map[string]*urlEvents{"id": {rejected: 1}}, quarantined: map[string]bool{"id": true}})
	var failed []string
	for _, x := range r.rows {
		if !x.ok {
			failed = append(failed, x.name)
		}
	}
	if want := []string{"right bytes rejected"}; !slices.Equal(failed, want) {
		t.Fatalf("failed rows %q, want %q", failed, want)
	}
	if _, ok := o.rejected(); !ok || !(outcome{done: true, value: "1"}).final() || (outcome{done: true, value: "pending"}).final() {
		t.Fatal("rejected and final misread the marker")
	}
}

// The download rows: a URL only for what completed, each answer as its
// verdict says (the marker read before the ask, and the final one), a
// 429, a 503 or a 404 past the grant record's life counted but not
// judged, a sampled URL's bytes the upload's.
func TestDownloadRows(t *testing.T) {
	now := time.Now()
	const life = 14 * time.Second
	u := received{tenant: "t0", user: "u000", urlID: "id", size: 100, signedAt: now.Add(-5 * time.Second)}
	old := u
	old.signedAt = now.Add(-time.Minute)
	completed := outcome{done: true, value: "1"}
	rejected := outcome{done: true, value: "rejected:type_mismatch"}
	const (
		leak  = "download URL for an upload not completed (rejected, verifying)"
		wrong = "download answer not as its verdict (201 completed, 410 rejected, 409 verifying)"
		bytes = "downloaded bytes not the upload's (some fetched when uploads completed)"
	)
	ask := func(u received, before string, a dlAnswer) dlAsk {
		return dlAsk{u: u, before: before, at: now, dlAnswer: a}
	}
	for _, c := range []struct {
		name  string
		final outcome
		a     dlAsk
		fail  []string
	}{
		{"completed, granted, same bytes", completed, ask(u, "1", dlAnswer{status: 201, fetched: true, same: true}), nil},
		{"completed, granted, not sampled", completed, ask(u, "1", dlAnswer{status: 201}), []string{bytes}},
		{"completed, granted, other bytes", completed, ask(u, "1", dlAnswer{status: 201, fetched: true}), []string{bytes}},
		{"verifying, granted, completed since", completed, ask(u, "verifying", dlAnswer{status: 201, fetched: true, same: true}), nil},
		{"verifying, 409", completed, ask(u, "verifying", dlAnswer{status: 409, code: "not_completed"}), nil},
		{"rejected, 410", rejected, ask(u, rejected.value, dlAnswer{status: 410, code: "upload_rejected"}), nil},
		{"rejecting, 410", rejected, ask(u, "rejecting:type_mismatch", dlAnswer{status: 410}), nil},
		{"short bucket", completed, ask(u, "1", dlAnswer{status: 429}), nil},
		{"limiter unavailable", completed, ask(u, "1", dlAnswer{status: 503}), nil},
		{"404 past the record's life", completed, ask(old, "1", dlAnswer{status: 404}), nil},
		{"404 within the record's life", completed, ask(u, "1", dlAnswer{status: 404}), []string{wrong}},
		{"rejected, granted", rejected, ask(u, rejected.value, dlAnswer{status: 201, fetched: true, same: true}), []string{leak}},
		{"verifying, granted, rejected since", rejected, ask(u, "verifying", dlAnswer{status: 201, fetched: true, same: true}), []string{leak}},
		{"completed, 409", completed, ask(u, "1", dlAnswer{status: 409}), []string{wrong}},
		{"rejected, 409", rejected, ask(u, rejected.value, dlAnswer{status: 409}), []string{wrong}},
		{"completed, 410", completed, ask(u, "1", dlAnswer{status: 410}), []string{wrong}},
		{"a 500", completed, ask(u, "verifying", dlAnswer{status: 500}), []string{wrong}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &report{}
			r.checkDownloads(result{urls: []received{u}}, []outcome{c.final}, []dlAsk{c.a}, life)
			var failed []string
			for _, x := range r.rows {
				if !x.ok {
					failed = append(failed, x.name)
				}
			}
			if !slices.Equal(failed, c.fail) {
				t.Fatalf("failed rows %q, want %q", failed, c.fail)
			}
		})
	}
}

// The download rows are not vacuous: a stored upload that completed with
// no download fetched fails the bytes row.
func TestDownloadRowsNotVacuous(t *testing.T) {
	u := received{tenant: "t0", user: "u000", urlID: "id", size: 100, uploaded: true}
	r := &report{}
	r.checkDownloads(result{urls: []received{u}}, []outcome{{done: true, value: "1"}}, nil, time.Minute)
	var failed []string
	for _, x := range r.rows {
		if !x.ok {
			failed = append(failed, x.name)
		}
	}
	if want := []string{"downloaded bytes not the upload's (some fetched when uploads completed)"}; !slices.Equal(failed, want) {
		t.Fatalf("failed rows %q, want %q", failed, want)
	}
}
