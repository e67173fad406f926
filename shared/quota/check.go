package quota

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/keys"
)

// The checks a Store makes before it touches anything: a double of the Store
// (quotatest.Twin) makes the same, so both refuse the same calls with the
// same errors. Each operation's Check* sits beside it (CheckSpend in
// spend.go, …); here are the parts they share.

// checkAsk refuses a request a script could not run: an invalid tenant,
// no fingerprint, a nonce a tombstone could not list, an idempotency key
// outside the tenant's hash tag, and for a call that moves tokens, bad
// buckets.
func checkAsk(a Ask, spends bool) error {
	if !keys.ValidTenant(a.Tenant) {
		return fmt.Errorf("quota: tenant %q is not valid", a.Tenant)
	}
	if a.Fingerprint == "" {
		return errors.New("quota: no request fingerprint")
	}
	if err := checkNonce(a.Nonce); err != nil {
		return err
	}
	if err := inTenant(a.Tenant, a.Idem); err != nil {
		return err
	}
	if spends {
		return checkBuckets(a.Tenant, a.Buckets)
	}
	return nil
}

// checkNonce refuses a nonce a tombstone could not list: the scripts keep
// several, space-separated.
func checkNonce(n string) error {
	if n == "" || len(n) > maxNonce {
		return fmt.Errorf("quota: nonce %q: want 1 to %d characters", n, maxNonce)
	}
	for i := range len(n) {
		if n[i] <= ' ' || n[i] > '~' {
			return fmt.Errorf("quota: nonce %q: want visible ASCII, no space", n)
		}
	}
	return nil
}

func checkGrant(tenant, urlID string) error {
	if !keys.ValidTenant(tenant) {
		return fmt.Errorf("quota: tenant %q is not valid", tenant)
	}
	if urlID == "" {
		return errors.New("quota: no urlId")
	}
	return nil
}

func checkBuckets(tenant string, bs []bucket.Bucket) error {
	if len(bs) == 0 {
		return errors.New("quota: no buckets")
	}
	for _, b := range bs {
		if err := inTenant(tenant, b.Key); err != nil {
			return err
		}
		if err := b.Limit.Validate(); err != nil {
			return fmt.Errorf("quota: bucket %s: %w", b.Key, err)
		}
		if !(b.Units >= 0) || math.IsInf(b.Units, 1) {
			return fmt.Errorf("quota: bucket %s: units %v: must be 0 (requests) or a finite count of bytes", b.Key, b.Units)
		}
	}
	return nil
}

// checkTTL refuses what PEXPIRE or SET PX would not take as an expiry (under
// a millisecond), or would take as deleting the key at once.
func checkTTL(what string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("quota: %s TTL %v: must be at least 1ms", what, d)
	}
	return nil
}

// inTenant refuses a key outside the tenant's hash tag: on Redis Cluster
// the call would fail with CROSSSLOT on every retry.
func inTenant(tenant, key string) error {
	if key == "" || hashTag(key) != hashTag(keys.TenantBucket(tenant)) {
		return fmt.Errorf("quota: key %q is outside tenant %q's hash tag", key, tenant)
	}
	return nil
}

// hashTag is the part of key Redis Cluster hashes: the first {…} that holds
// something, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// checkEach refuses a batch of op with a request check refuses, or with
// requests of several tenants.
func checkEach[Q any](op string, qs []Q, check func(Q) (tenant string, err error)) error {
	first := ""
	for i, q := range qs {
		tn, err := check(q)
		if err != nil {
			return fmt.Errorf("%s %d: %w", op, i, err)
		}
		if i == 0 {
			first = tn
		} else if tn != first {
			return errors.New("quota: a " + op + " batch holds tenants " + first + " and " + tn)
		}
	}
	return nil
}
