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
// same errors.

// CheckSpend is Spend's and Coalescer.Spend's refusal of a call, nil for a
// valid one.

func CheckSpend(a Ask, inFlight time.Duration) error {
	if err := checkTTL("in-flight", inFlight); err != nil {
		return err
	}
	if l := a.Live; l != nil {
		if l.Max < 1 || l.Until.IsZero() {
			return fmt.Errorf("quota: live grants: max %d until %v: want at least 1 and a time", l.Max, l.Until)
		}
		if err := inTenant(a.Tenant, l.Key); err != nil {
			return err
		}
	}
	return checkAsk(a, true)
}

// CheckUndo is Undo's refusal of a call, nil for a valid one.
func CheckUndo(a Ask, urlID string) error {
	if err := checkGrant(a.Tenant, urlID); err != nil {
		return err
	}
	return checkAsk(a, true)
}

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

// CheckCancel is Cancel's refusal of a call, nil for a valid one.
func CheckCancel(a Ask) error { return checkAsk(a, true) }

// CheckStatus is Status's refusal of a call, nil for a valid one.
func CheckStatus(tenant, urlID string) error { return checkGrant(tenant, urlID) }

// CheckPeek is Peek's refusal of a call, nil for a valid one.
func CheckPeek(tenant string, bs []bucket.Bucket) error { return checkBuckets(tenant, bs) }

// CheckRefill is Refill's refusal of a call, nil for a valid one.
func CheckRefill(tenant, key string) error { return inTenant(tenant, key) }

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

// CheckComplete is Complete's refusal of a call, nil for a valid one.
func CheckComplete(c Completion) error {
	if err := checkGrant(c.Tenant, c.URLID); err != nil {
		return err
	}
	if c.Value == "" {
		return fmt.Errorf("quota: done marker of %s: empty value", c.URLID)
	}
	return checkTTL("done marker", completeTTL(c.TTL))
}

// CheckRefund is Refund's refusal of a call, nil for a valid one.
func CheckRefund(ds []Due) error {
	for i, d := range ds {
		if err := checkGrant(d.Tenant, d.URLID); err != nil {
			return fmt.Errorf("due grant %d: %w", i, err)
		}
		if len(d.Buckets) == 0 {
			continue // a marker-only refund: it ends the grant, credits nothing
		}
		if err := checkBuckets(d.Tenant, d.Buckets); err != nil {
			return fmt.Errorf("due grant %d: %w", i, err)
		}
	}
	return nil
}

// CheckFinishBatch is FinishBatch's refusal of a batch, nil for a valid one.
func CheckFinishBatch(fs []Finishing) error {
	return checkEach("finish", fs, func(f Finishing) (string, error) { return f.Ask.Tenant, CheckFinish(f.Ask, f.Finished) })
}

// CheckSpendBatch is SpendBatch's refusal of a batch, nil for a valid one.
func CheckSpendBatch(ss []Spending) error {
	return checkEach("spend", ss, func(sp Spending) (string, error) { return sp.Ask.Tenant, CheckSpend(sp.Ask, sp.InFlight) })
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
