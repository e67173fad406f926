package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// attempt is one sign request as the scripts see it.
type attempt struct {
	who     identity.Caller
	req     request.Sign
	ask     quota.Ask
	buckets []bucket.Bucket // the caller's tier, the tenant, and for anonymous callers anonymous_all; in shadow mode the caller's ceiling last
	// charged are the buckets ask.Buckets spends from, tagged with their
	// roles: what the grant's credits name (credits).
	charged []tiers.RoleBucket
	// hard are the buckets that refuse even in shadow mode: the caller's
	// ceiling and, for an anonymous caller, anonymous_all. Nil outside
	// shadow mode.
	hard []tiers.RoleBucket
}

// newAttempt is who's sign request req under set. shadowCap above 0 puts
// it in shadow mode: a ceiling of shadowCap times the caller's tier is
// spent by every sign and refuses when short (keys.ShadowBucket).
func newAttempt(who identity.Caller, req request.Sign, set tiers.Set, shadowCap float64) attempt {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", who.Tenant, who.Subject, req.ContentType, req.ContentLength)
	// A checksum is part of what was asked (a key reused with other bytes
	// is refused); a request without one hashes as before it existed.
	if req.Checksum != "" {
		io.WriteString(h, "\x00sha256:"+req.Checksum) // hash.Hash never fails
	}
	if req.ChecksumAlgorithm != "" {
		io.WriteString(h, "\x00checksumAlgorithm:"+req.ChecksumAlgorithm)
	}
	// So is a filename: a key reused with another name is refused.
	if req.Filename != "" {
		io.WriteString(h, "\x00filename:"+req.Filename)
	}
	// tiers.Parse guarantees the caller tiers and the tenant tier exist;
	// tiers.Set.For derives anonymous_all when it is not named.
	charged, _ := set.SignBuckets(who.Tenant, who.Subject, who.Tier)
	// The tiers of bytes, when set, in the same decision: the caller's and
	// the tenant's buckets of bytes, each spending contentLength.
	charged = append(charged, set.ByteBuckets(who.Tenant, who.Subject, who.Tier, req.ContentLength)...)
	var hard []tiers.RoleBucket
	if shadowCap > 0 {
		ceiling := tiers.RoleBucket{Role: tiers.RoleShadow, Bucket: bucket.Bucket{Key: keys.ShadowBucket(who.Tenant, who.Subject), Limit: shadowLimit(charged[0].Limit, shadowCap)}}
		for _, b := range charged {
			if b.Role == tiers.RoleAnonymousAll {
				hard = append(hard, b)
			}
		}
		hard = append(hard, ceiling)
		charged = append(charged, ceiling)
	}
	buckets := tiers.Plain(charged)
	return attempt{
		who: who,
		req: req,
		ask: quota.Ask{
			Tenant:      who.Tenant,
			Idem:        keys.Idempotency(who.Tenant, who.Subject, req.Key),
			Fingerprint: hex.EncodeToString(h.Sum(nil)),
			Buckets:     buckets,
		},
		buckets: buckets,
		charged: charged,
		hard:    hard,
	}
}

// spendsBytes is whether a spends from a bucket of bytes.
func (a attempt) spendsBytes() bool {
	for _, b := range a.ask.Buckets {
		if b.Units > 0 {
			return true
		}
	}
	return false
}

// credits are what a refund of the buckets a's Spend charged
// (a.ask.Buckets) gives back: each bucket by its role, with its shape now.
func (a attempt) credits() []ledger.Credit {
	return ledger.CreditsOf(a.charged)
}
