package bucket_test

import (
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/bucket"
)

// Peek tells what a Take would decide and spends nothing; Charge spends
// below zero, and a bucket that owes refuses until its refill paid the
// debt and one more token.
func TestLocalPeekAndCharge(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	b := bucket.Bucket{Key: "read:192.0.2.1", Limit: bucket.Limit{Capacity: 3, Rate: 1}}
	l := bucket.NewLocal()
	for range 5 {
		if res := l.Peek(now, 1, b); !res.Allowed || res.Remaining != 2 {
			t.Fatalf("peek of a full bucket: %+v, want allowed leaving 2", res)
		}
	}
	for range 5 { // two more than it holds
		l.Charge(now, 1, b)
	}
	if res := l.Peek(now, 1, b); res.Allowed || res.RetryAfter != 3*time.Second {
		t.Fatalf("peek of a bucket owing 2: %+v, want refused for 3s", res)
	}
	if res := l.Take(now.Add(2999*time.Millisecond), 1, b); res.Allowed {
		t.Fatalf("take before the debt and a token came back: %+v", res)
	}
	if res := l.Peek(now.Add(3*time.Second), 1, b); !res.Allowed {
		t.Fatalf("peek after 3s: %+v", res)
	}
	if res := l.Take(now.Add(3*time.Second), 1, b); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("take after 3s: %+v", res)
	}
}
