// Package grant is what the signer hands out — one presigned upload URL —
// and the ledger that remembers each grant until it is due for a refund check.
package grant

import "time"

// Grant is one issued URL. It is the ledger's message body (JSON) and what
// the sweeper needs to refund the token if the upload never happened.
type Grant struct {
	URLID     string    `json:"urlId"`
	Tenant    string    `json:"tenant"`
	Tier      string    `json:"tier"`    // the tier the caller's token came from: "user" or "anonymous"
	Subject   string    `json:"subject"` // the caller's bucket subject: "u:<user>" or "a:<ip hash>"
	Key       string    `json:"key"`     // the object key, incoming/<tenant>/<urlId>
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}
