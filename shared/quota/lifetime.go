package quota

import "time"

// GrantRecordTTL is how long a grant record (what GET /uploads/{urlId}
// reads) lives, and the least done-marker TTL the completer accepts
// (MINTGATE_DONE_TTL): 2 × (the URL's TTL + the sweep grace).
//
// The sweeper looks for the done marker at the URL's expiry + grace, and
// SQS may deliver late: a marker that expired first means a refund for an
// upload that happened, so the marker must outlive that check by a wide
// margin, not a tie. The record must live past the sweeper's check too, so
// the status can say "refunded" or "completed", and no longer than the
// done marker, or it would read "expired" for an upload that completed.
// One value holds both ends.
func GrantRecordTTL(urlTTL, grace time.Duration) time.Duration { return 2 * (urlTTL + grace) }
