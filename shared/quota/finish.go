package quota

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/gather"
	"github.com/mintgate/mintgate/shared/keys"
)

// Finished is what Finish stores once a grant is in the ledger.
type Finished struct {
	URLID     string
	Subject   string        // the caller's bucket subject, kept in the grant record
	Body      []byte        // the 201 body a replay answers with
	ExpiresAt time.Time     // the URL's expiry, kept in the grant record
	RecordTTL time.Duration // of the completed idempotency record
	GrantTTL  time.Duration // of the grant record
	// Multipart is a multipart grant's record (the signer's JSON: its
	// upload, layout and refund), kept in the grant record's field
	// "multipart"; empty for a single PUT.
	Multipart string
	// ContentType and ContentLength are what the grant was signed for,
	// kept in the grant record's fields "contentType" and "contentLength"
	// so that the completer can check the object against them. A record
	// written before they existed lacks both (GrantShape.Known false).
	ContentType   string
	ContentLength int64
	// ChecksumSHA256 is the base64 SHA-256 a single PUT's URL was bound
	// to, kept in the grant record's field "checksumSHA256" (for its
	// status and its events); empty for none and for a multipart grant.
	ChecksumSHA256 string
	// Filename is the name the uploader gave the file, kept in the grant
	// record's field "filename" (for its downloads); empty for none.
	Filename string
	// Traceparent is the sign's W3C traceparent, kept in the grant
	// record's field "traceparent" so that the completer's handling of
	// the upload joins the sign's trace; empty when the signer does not
	// trace.
	Traceparent string
}

// Finishing is one Finish of a batch: Store.Finish's arguments.
type Finishing struct {
	Ask      Ask
	Finished Finished
}

// Finish makes the idempotency record done with the 201 body (TTL
// f.RecordTTL) and writes the grant record keys.Grant(tenant, f.URLID)
// {expiresAt, subject[, multipart]} (TTL f.GrantTTL), atomically, with plain
// commands in one MULTI/EXEC: no script, since it moves no tokens and
// decides nothing. Whatever the record held is replaced: Finish follows
// this request's allowed Spend, and the URL it completes is paid for and
// leaves. A tombstone there (the in-flight mark expired and a retry was
// cancelled since) becomes this done record, which a late Spend of that
// retry finds and spends nothing on either (a replay, or reused).
func (s *Store) Finish(ctx context.Context, a Ask, f Finished) error {
	if err := CheckFinish(a, f); err != nil {
		return err
	}
	errs, err := s.finishAll(ctx, []Finishing{{Ask: a, Finished: f}})
	if err != nil {
		return err
	}
	return errs[0]
}

// FinishBatch runs Finishes of one tenant as one transaction of plain
// commands (MULTI, per Finish an HSET and a PEXPIRE of each of its two
// records, EXEC: one round trip, one slot on Redis Cluster, no script), in
// order: each is exactly Store.Finish, and sees the writes of those before
// it as if they had run one after another. The answers are in the order of
// fs: nil, or the error of that Finish's own commands on Redis (a
// redis.Error wrapped in ErrUnavailable, such as a WRONGTYPE; its other
// commands still ran, as a transaction runs every command it queued).
//
// An error refuses the batch before anything is sent (an invalid Finish,
// Finishes of several tenants) or is ErrUnavailable for the whole call:
// then all or none of the Finishes ran (a reply lost after EXEC); each is
// idempotent and may be retried.
func (s *Store) FinishBatch(ctx context.Context, fs []Finishing) ([]error, error) {
	if err := CheckFinishBatch(fs); err != nil || len(fs) == 0 {
		return nil, err
	}
	return s.finishAll(ctx, fs)
}

// finishCmds is how many commands one Finish queues.
const finishCmds = 4

// finishAll writes fs in one MULTI/EXEC; fs are checked.
func (s *Store) finishAll(ctx context.Context, fs []Finishing) ([]error, error) {
	pipe := s.rdb.TxPipeline()
	for _, f := range fs {
		fin := f.Finished
		pipe.HSet(ctx, f.Ask.Idem, "state", "done", "fp", f.Ask.Fingerprint, "nonce", f.Ask.Nonce, "body", fin.Body)
		pipe.PExpire(ctx, f.Ask.Idem, fin.RecordTTL)
		pipe.HSet(ctx, keys.Grant(f.Ask.Tenant, fin.URLID), grantFields(fin)...)
		pipe.PExpire(ctx, keys.Grant(f.Ask.Tenant, fin.URLID), fin.GrantTTL)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		// Not a reply of Redis (a lost connection, a timeout): the whole
		// call. A reply is the first failing command's; each Finish gets
		// its own commands' below.
		if _, replied := errors.AsType[redis.Error](err); !replied || len(cmds) != finishCmds*len(fs) {
			return nil, unavailable("finish", err)
		}
	}
	out := make([]error, len(fs))
	for i := range fs {
		for _, c := range cmds[i*finishCmds : (i+1)*finishCmds] {
			if err := c.Err(); err != nil {
				out[i] = unavailable("finish", err)
				break
			}
		}
	}
	return out, nil
}

// grantFields are the field-value pairs of f's grant record: expiresAt and
// subject; contentType and contentLength when f names its type (what the
// completer checks the object against); multipart for a multipart grant.
func grantFields(f Finished) []any {
	fields := []any{"expiresAt", f.ExpiresAt.UnixMilli(), "subject", f.Subject}
	if f.ContentType != "" {
		fields = append(fields, "contentType", f.ContentType, "contentLength", f.ContentLength)
	}
	if f.Multipart != "" {
		fields = append(fields, "multipart", f.Multipart)
	}
	if f.Filename != "" {
		fields = append(fields, "filename", f.Filename)
	}
	if f.ChecksumSHA256 != "" {
		fields = append(fields, "checksumSHA256", f.ChecksumSHA256)
	}
	if f.Traceparent != "" {
		fields = append(fields, "traceparent", f.Traceparent)
	}
	return fields
}

// FinishCoalescer gathers concurrent Finishes of one tenant into one
// transaction, FinishBatch, by the Coalescer's rules (the same gatherer): a
// lone Finish leaves at once, exactly a Store.Finish; others wait for the
// reply of a call of their tenant's, the window, or maxBatch waiting.
//
// Each caller gets its own answer, exactly what Store.Finish would have
// answered had the Finishes of its batch run one after another. A call
// that fails fails every Finish in it with the same error a single Finish
// would have had; a Finish is idempotent, so its caller retries as after a
// single one. A caller whose ctx ended before its batch left is not sent.
type FinishCoalescer struct {
	g *gather.Gatherer[Finishing, error]
}

// NewFinishCoalescer gathers Finishes on store; a window or maxBatch of zero
// or less is the default (DefaultCoalesceWindow, DefaultCoalesceBatch).
// maxBatch 1 sends every Finish alone.
func NewFinishCoalescer(store *Store, window time.Duration, maxBatch int) *FinishCoalescer {
	run := func(ctx context.Context, fs []Finishing) []error {
		out, err := store.FinishBatch(ctx, fs)
		if err != nil {
			out = make([]error, len(fs))
			for i := range out {
				out[i] = err
			}
		}
		return out
	}
	return &FinishCoalescer{g: newGatherer(window, maxBatch, run)}
}

// Finish is Store.Finish, sharing a transaction with the concurrent
// Finishes of a's tenant.
func (c *FinishCoalescer) Finish(ctx context.Context, a Ask, f Finished) error {
	if err := CheckFinish(a, f); err != nil {
		return err
	}
	res, gaveUp := c.g.Do(ctx, a.Tenant, Finishing{Ask: a, Finished: f})
	if gaveUp != nil {
		return unavailable("finish", gaveUp)
	}
	return res
}

// Stats is how many transactions the FinishCoalescer made and how many
// Finishes they carried.
func (c *FinishCoalescer) Stats() (calls, finishes int64) { return c.g.Stats() }

// CheckFinish is Finish's refusal of a call, nil for a valid one.
func CheckFinish(a Ask, f Finished) error {
	if err := checkGrant(a.Tenant, f.URLID); err != nil {
		return err
	}
	if err := checkTTL("record", f.RecordTTL); err != nil {
		return err
	}
	if err := checkTTL("grant record", f.GrantTTL); err != nil {
		return err
	}
	return checkAsk(a, false)
}

// CheckFinishBatch is FinishBatch's refusal of a batch, nil for a valid one.
func CheckFinishBatch(fs []Finishing) error {
	return checkEach("finish", fs, func(f Finishing) (string, error) { return f.Ask.Tenant, CheckFinish(f.Ask, f.Finished) })
}
