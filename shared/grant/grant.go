// Package grant is what the signer hands out — one presigned upload URL —
// and the ledger that remembers each grant until it is due for a refund check.
//
// Grants are group-committed: the grants of concurrent signs travel in one
// ledger message, a Batch, sealed with an HMAC so that nobody without the
// secret can make the sweepers refund anything.
package grant

import "time"

// Grant is one issued URL: what the sweeper needs to refund its token if the
// upload never happened.
type Grant struct {
	URLID     string    `json:"urlId"`
	Tenant    string    `json:"tenant"`
	Tier      string    `json:"tier"`    // the tier the caller's token came from: "user" or "anonymous"
	Subject   string    `json:"subject"` // the caller's bucket subject: "u:<user>" or "a:<ip hash>"
	Key       string    `json:"key"`     // the object key, incoming/<tenant>/<urlId>
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Degraded marks a grant issued from in-process buckets while Redis was
	// unavailable: it never charged Redis, so no sweeper ever credits Redis
	// for it.
	Degraded bool `json:"degraded,omitempty"`
	// Shadow marks a grant issued in shadow mode (MINTGATE_SHADOW_TENANTS)
	// although a bucket was short: it charged nothing, so no sweeper ever
	// credits anything for it. Roll sweepers out before signers that set
	// it: an older sweeper would refund it.
	Shadow bool `json:"shadow,omitempty"`
}

// Batch is one ledger message: the grants of signs that were committed
// together, due at once when the latest of them is due.
type Batch struct {
	ID     string  `json:"id"`
	Grants []Grant `json:"grants"`
}

// DueAt is when the batch may be swept: the latest expiry among its
// grants, plus grace. No grant of the batch is ever due before it; none is
// later than it by more than the spread of expiries in the batch (the
// commit window).
func (b Batch) DueAt(grace time.Duration) time.Time {
	var latest time.Time
	for _, g := range b.Grants {
		if g.ExpiresAt.After(latest) {
			latest = g.ExpiresAt
		}
	}
	return latest.Add(grace)
}
