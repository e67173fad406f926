package chaos

import (
	"testing"
	"time"
)

// The multipart rows judge each way a grant may end: only a completed
// grant (object, done marker, no standing refund) and one ended without an
// object (upload gone, refund standing) pass, each as its client was told.
func TestMultipartRows(t *testing.T) {
	now := time.Now()
	g := mpGrant{tenant: "t0", user: "u000", urlID: "id", size: 10, parts: 1, expiresAt: now}
	completed := mpOutcome{outcome: outcome{done: true}, object: true, objectSize: 10}
	ended := mpOutcome{outcome: outcome{refunded: true}}
	with := func(g mpGrant, f func(*mpGrant)) mpGrant { f(&g); return g }
	for _, c := range []struct {
		name string
		g    mpGrant
		o    mpOutcome
		fail []string // the rows that fail
	}{
		{"completed", with(g, func(g *mpGrant) { g.complete = "200" }), completed, nil},
		{"completed, refund taken back", g, mpOutcome{outcome: outcome{done: true, refunded: true, takenBack: true}, object: true, objectSize: 10}, nil},
		{"completed, then not abortable", with(g, func(g *mpGrant) { g.complete, g.abort = "200", "409 not_abortable" }), completed, nil},
		{"aborted", with(g, func(g *mpGrant) { g.abort = "204" }), ended, nil},
		{"abandoned", g, ended, nil},
		{"aborted, then closed", with(g, func(g *mpGrant) { g.abort, g.complete = "204", "410 grant_closed" }), ended, nil},
		{"completed and refunded", g, mpOutcome{outcome: outcome{done: true, refunded: true}, object: true, objectSize: 10},
			[]string{"multipart completed, refunded"}},
		{"told 200, refunded", with(g, func(g *mpGrant) { g.complete = "200" }), ended,
			[]string{"multipart completed, refunded", "multipart answers agree with the end"}},
		{"lost refund", g, mpOutcome{}, []string{"multipart ended without object, not refunded (lost refunds)"}},
		{"refund taken back, no object", g, mpOutcome{outcome: outcome{refunded: true, takenBack: true}},
			[]string{"multipart ended without object, not refunded (lost refunds)"}},
		{"left open", g, mpOutcome{outcome: outcome{refunded: true}, open: true}, []string{"multipart uploads left open in S3"}},
		{"done, no object", g, mpOutcome{outcome: outcome{done: true, refunded: true}},
			[]string{"multipart done marker ⇔ object of its size"}},
		{"object, no done marker", g, mpOutcome{object: true, objectSize: 10}, []string{"multipart done marker ⇔ object of its size"}},
		{"object of another size", g, mpOutcome{outcome: outcome{done: true}, object: true, objectSize: 9},
			[]string{"multipart done marker ⇔ object of its size"}},
		{"told 204, object", with(g, func(g *mpGrant) { g.abort = "204" }), completed, []string{"multipart answers agree with the end"}},
		{"told not abortable, none", with(g, func(g *mpGrant) { g.abort = "409 not_abortable" }), ended, []string{"multipart answers agree with the end"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &report{origin: now}
			r.checkMultipart(result{mp: mpRecord{grants: []mpGrant{c.g}}}, []mpOutcome{c.o}, 0)
			var failed []string
			for _, x := range r.rows {
				if !x.ok {
					failed = append(failed, x.name)
				}
			}
			if len(failed) != len(c.fail) {
				t.Fatalf("failed rows %q, want %q", failed, c.fail)
			}
			for i := range failed {
				if failed[i] != c.fail[i] {
					t.Fatalf("failed rows %q, want %q", failed, c.fail)
				}
			}
		})
	}
}
