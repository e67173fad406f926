package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mintgate/mintgate/shared/events"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
)

// The verification gate's verdicts (SPEC §9). Every upload's done marker
// goes verifying → verified → 1 (completed, its completed event stored) or
// verifying → rejecting:<reason> → rejected:<reason> (its object moved to
// quarantine/<tenant>/<urlId>, its rejected event stored); the older
// pending, which the signer and the sweeper write for a multipart upload
// S3 completed, reads as verifying. A rejected upload keeps its tokens and
// bytes spent: the marker exists, so it is never refunded.

// final reports whether o's done marker, if it has one, holds a final
// verdict: completed ("1") or rejected:<reason>. Anything else is a step
// in between, which a completer that died or waits on Redis, NATS or S3
// resumes from when its message comes back.
func (o outcome) final() bool {
	if !o.done {
		return true
	}
	v, _ := quota.ReadDone(o.value)
	return o.value == quota.DoneCompleted || v == quota.Refused
}

// rejected reports whether the gate refused o's upload (its marker reads
// rejecting or rejected), and why.
func (o outcome) rejected() (reason string, ok bool) {
	if !o.done {
		return "", false
	}
	v, reason := quota.ReadDone(o.value)
	return reason, v == quota.Refusing || v == quota.Refused
}

// completed reports whether o's upload passed the gate and its completed
// event is stored: its marker reads "1".
func (o outcome) completed() bool { return o.done && o.value == quota.DoneCompleted }

// bytes says what u's upload carried, for the examples.
func (u received) bytes() string {
	what := "PNG"
	if u.wrong {
		what = "HTML declared image/png"
	}
	if u.encoding != "" {
		what += ", Content-Encoding " + u.encoding
	}
	if u.reput != 0 {
		what += fmt.Sprintf(", re-PUT after rejection %d", u.reput)
	}
	return what
}

// due is the verdict u's upload must get, once stored: "" completed, else
// rejected with this reason. The stored headers are checked before the
// bytes: an encoded upload is encoding_not_allowed, HTML or not.
func (u received) due() string {
	switch {
	case u.encoding != "":
		return "encoding_not_allowed"
	case u.wrong:
		return "type_mismatch"
	}
	return ""
}

// eventsFilter is every subject of the MINTGATE_UPLOADS stream: completed
// and rejected events alike.
const eventsFilter = "mintgate.uploads.>"

// urlEvents counts the events the stream holds for one urlId.
type urlEvents struct {
	completed, rejected int
	reason              string // the last rejected event's
}

// verdicts is what the check reads of the gate besides the markers: every
// event of the stream, per urlId, and which rejected uploads lie in
// quarantine.
type verdicts struct {
	events     map[string]*urlEvents
	eventsRead int
	// quarantined: urlId of an upload whose marker reads rejected → its
	// object is at quarantine/<tenant>/<urlId>, of its grant's size, and
	// no longer under incoming/.
	quarantined map[string]bool
	// overwritten: urlId of an upload PUT again after its rejection (S3
	// took the second PUT) whose quarantined object is not the first one's
	// bytes.
	overwritten map[string]bool
}

// readVerdicts reads the stream's events and, for every upload the gate
// rejected, S3: where its object lies.
func (st *stack) readVerdicts(ctx context.Context, res result, outs []outcome, mouts []mpOutcome) (verdicts, error) {
	v := verdicts{quarantined: map[string]bool{}, overwritten: map[string]bool{}}
	var err error
	if v.events, v.eventsRead, err = st.uploadEvents(ctx); err != nil {
		return v, err
	}
	type object struct {
		urlID, key, quarantine string
		size                   int64
		first                  []byte // the bytes the quarantine must hold, when a second PUT was taken
	}
	var rejected []object
	for i, u := range res.urls {
		if _, ok := outs[i].rejected(); ok {
			o := object{u.urlID, keys.Object(u.tenant, u.urlID), events.QuarantineKey(u.tenant, u.urlID), u.size, nil}
			if u.reput == http.StatusOK {
				o.first = body(u.size, u.wrong)
			}
			rejected = append(rejected, o)
		}
	}
	for i, g := range res.mp.grants {
		if _, ok := mouts[i].rejected(); ok {
			rejected = append(rejected, object{g.urlID, g.objKey, events.QuarantineKey(g.tenant, g.urlID), g.size, nil})
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
	)
	client := st.s3.Client()
	for _, o := range rejected {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			qSize, inQuarantine, qerr := head(ctx, client, st.s3.Bucket, o.quarantine)
			_, inIncoming, ierr := head(ctx, client, st.s3.Bucket, o.key)
			same, ferr := true, error(nil)
			if o.first != nil && inQuarantine {
				same, ferr = holds(ctx, client, st.s3.Bucket, o.quarantine, o.first)
			}
			mu.Lock()
			defer mu.Unlock()
			if err := errors.Join(qerr, ierr, ferr); err != nil {
				errs = append(errs, err)
				return
			}
			v.quarantined[o.urlID] = inQuarantine && qSize == o.size && !inIncoming
			v.overwritten[o.urlID] = !same
		})
	}
	wg.Wait()
	return v, errors.Join(errs...)
}

// holds reports whether the object at key is exactly want.
func holds(ctx context.Context, client *s3.Client, bucket, key string, want []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return false, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(out.Body)
	if err != nil {
		return false, fmt.Errorf("get %s: %w", key, err)
	}
	return bytes.Equal(got, want), nil
}

// uploadEvents reads every event of the MINTGATE_UPLOADS stream with the
// test's own ordered consumer, up to the last one stored when it starts
// (the load is over and every verdict final: no more come), and counts
// them per urlId. It also returns how many it read.
func (st *stack) uploadEvents(ctx context.Context) (map[string]*urlEvents, int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out := map[string]*urlEvents{}
	s, err := st.js.Stream(ctx, events.Stream)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s: %w", events.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("stream %s info: %w", events.Stream, err)
	}
	if info.State.Msgs == 0 {
		return out, 0, nil
	}
	c, err := st.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{eventsFilter}})
	if err != nil {
		return nil, 0, fmt.Errorf("ordered consumer on %s: %w", events.Stream, err)
	}
	read := 0
	for last := uint64(0); last < info.State.LastSeq; {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if transient(err) && ctx.Err() == nil {
			// The soak's last fault may have been a NATS node's kill: the
			// cluster is still electing the stream's leader, and the
			// ordered consumer resumes after the last event it gave.
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, read, fmt.Errorf("fetch events: %w", err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, read, fmt.Errorf("event metadata: %w", err)
			}
			last = meta.Sequence.Stream
			read++
			if err := countEvent(out, m.Subject(), m.Data()); err != nil {
				return nil, read, err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !(transient(err) && ctx.Err() == nil) {
			return nil, read, fmt.Errorf("fetch events: %w", err)
		}
		if ctx.Err() != nil {
			return nil, read, fmt.Errorf("events read up to seq %d of %d: %w", last, info.State.LastSeq, ctx.Err())
		}
	}
	return out, read, nil
}

// transient reports whether err is a NATS cluster's passing state (no
// responder while a stream's leader is elected, a request timed out), which
// reading again soon gets past.
func transient(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoHeartbeat)
}

// countEvent adds one event, of subject and body data, to out.
func countEvent(out map[string]*urlEvents, subject string, data []byte) error {
	// The same stream carries the records' feed: refunds, aborts and
	// the signers' tallies. None is a verdict.
	for _, p := range []string{events.RefundedPrefix, events.AbortedPrefix, events.TalliesPrefix} {
		if strings.HasPrefix(subject, p) {
			return nil
		}
	}
	var ev struct {
		URLID  string `json:"urlId"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(data, &ev); err != nil || ev.URLID == "" {
		return fmt.Errorf("event on %s: unreadable body %q", subject, data)
	}
	e := out[ev.URLID]
	if e == nil {
		e = &urlEvents{}
		out[ev.URLID] = e
	}
	switch {
	case strings.HasPrefix(subject, events.SubjectPrefix):
		e.completed++
	case strings.HasPrefix(subject, events.RejectedPrefix):
		e.rejected++
		e.reason = ev.Reason
	default:
		return fmt.Errorf("event on an unknown subject %s", subject)
	}
	return nil
}

// checkVerdicts: the gate rejected exactly the wrong bytes, as
// type_mismatch, and the encoded uploads, as encoding_not_allowed, each in
// quarantine and never refunded, and passed every right one; a second PUT
// after a rejection never stayed in incoming/ nor replaced the
// quarantined object; no urlId has both a completed and a rejected event;
// and no done marker is left between two values once settled.
func (r *report) checkVerdicts(res result, outs []outcome, mouts []mpOutcome, v verdicts) {
	var wrongStored, wrongMissed, rightRejected, refunded, notQuarantined, between int
	// judge weighs one upload, of urlID: one due a rejection (when
	// stored) must end rejected:<due>, right ones never rejected.
	judge := func(urlID, due string, stored bool, o outcome, example func(what string)) {
		reason, rejected := o.rejected()
		ev := v.eventsOf(urlID)
		wrong := due != ""
		switch {
		case wrong && !stored: // no object, no verdict
		case wrong && (o.value != quota.Rejected(due) || ev.completed > 0):
			wrongMissed++
			example("wrong bytes or encoding not rejected")
		case !wrong && (rejected || ev.rejected > 0):
			rightRejected++
			example("right bytes rejected (" + reason + ev.reason + ")")
		}
		if rejected && o.refundStands() {
			refunded++
			example("rejected and refunded")
		}
		if rejected && !v.quarantined[urlID] {
			notQuarantined++
			example("rejected, not in quarantine only")
		}
		if !o.final() {
			between++
			example("verdict left in between")
		}
	}
	reputs, overwritten := 0, 0
	for i, u := range res.urls {
		o := outs[i]
		// Stored: the PUT said so, or the completer saw the object.
		stored := u.uploaded || o.done
		if u.due() != "" && stored {
			wrongStored++
		}
		judge(u.urlID, u.due(), stored, o, func(what string) { r.example(what, u, o) })
		if u.reput == http.StatusOK {
			reputs++
			if v.overwritten[u.urlID] {
				overwritten++
				r.example("a re-PUT replaced the quarantined object", u, o)
			}
		}
	}
	for i, g := range res.mp.grants {
		o := mouts[i]
		judge(g.urlID, "", o.object || o.done, o.outcome, func(what string) { r.mpExample(what, g, o) })
	}
	r.summarizeReputs(res)
	both := 0
	for _, id := range slices.Sorted(maps.Keys(v.events)) {
		if e := v.events[id]; e.completed > 0 && e.rejected > 0 {
			both++
			r.addExample("completed and rejected", func(func(time.Time) string) string {
				return fmt.Sprintf("%s: %d completed events, %d rejected (%s)", id, e.completed, e.rejected, e.reason)
			})
		}
	}
	r.add("wrong bytes or encoding not rejected (rejected:type_mismatch or encoding_not_allowed, no completed event)", fmt.Sprintf("%d of %d stored", wrongMissed, wrongStored), "0", wrongMissed == 0)
	r.add("re-PUT after rejection over the quarantined object (second PUTs S3 took)", fmt.Sprintf("%d of %d", overwritten, reputs), "0", overwritten == 0)
	r.add("right bytes rejected", fmt.Sprint(rightRejected), "0", rightRejected == 0)
	r.add("rejected and refunded", fmt.Sprint(refunded), "0", refunded == 0)
	r.add("rejected, not in quarantine only (of its size, gone from incoming/)", fmt.Sprint(notQuarantined), "0", notQuarantined == 0)
	r.add("completed and rejected (urlIds with both events)", fmt.Sprintf("%d of %d urlIds", both, len(v.events)), "0", both == 0)
	r.add("verdicts left in between after the settle time", fmt.Sprint(between), "0", between == 0)
}

// eventsOf is the events of urlID, none when the stream holds none.
func (v verdicts) eventsOf(urlID string) urlEvents {
	if e := v.events[urlID]; e != nil {
		return *e
	}
	return urlEvents{}
}

// summarizeVerdicts writes the verdicts' numbers above the table.
func (r *report) summarizeVerdicts(outs []outcome, mouts []mpOutcome, v verdicts) {
	all := slices.Clone(outs)
	for _, o := range mouts {
		all = append(all, o.outcome)
	}
	rejected, completed := map[string]int{}, 0
	between := map[string]int{}
	nRejected, nBetween := 0, 0
	for _, o := range all {
		switch reason, ok := o.rejected(); {
		case !o.final():
			between[o.value]++
			nBetween++
		case ok:
			rejected[reason]++
			nRejected++
		case o.completed():
			completed++
		}
	}
	completedEvents, rejectedEvents := 0, 0
	for _, e := range v.events {
		completedEvents += e.completed
		rejectedEvents += e.rejected
	}
	r.summary = append(r.summary, fmt.Sprintf("verdicts: %d rejected (%s), %d completed, %d verifying left (%s); "+
		"events read: %d (%d completed, %d rejected, over %d urlIds)",
		nRejected, answers(rejected), completed, nBetween, answers(between),
		v.eventsRead, completedEvents, rejectedEvents, len(v.events)))
}

// summarizeReputs writes the encoded uploads and the re-PUTs after
// rejection, by answer, above the table.
func (r *report) summarizeReputs(res result) {
	encoded, answers := map[string]int{}, map[string]int{}
	for _, u := range res.urls {
		if u.encoding != "" && u.uploaded {
			encoded[u.encoding]++
		}
		if u.reput != 0 {
			answers[fmt.Sprint(u.reput)]++
		}
	}
	r.summary = append(r.summary, fmt.Sprintf("encoded uploads stored: %v; re-PUTs after rejection, by answer: %v (200: S3 took it, the completer must remove it)",
		encoded, answers))
}
