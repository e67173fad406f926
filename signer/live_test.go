package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/ratelimit"
)

// MINTGATE_MAX_LIVE_GRANTS=3: three live grants, the fourth 429 live_grants
// (spending nothing); a completed grant frees its slot, and once the
// grants expire signing works again.
func TestLiveGrantsBound(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_MAX_LIVE_GRANTS"] = "3"
	s := start(t, env)
	alice := s.token("acme", "alice")
	var ids []string
	for range 3 {
		r := s.sign(alice, newKey(), pngBody)
		if r.status != http.StatusCreated {
			t.Fatalf("sign: %d %s", r.status, r.raw)
		}
		ids = append(ids, r.str("urlId"))
	}
	before := s.tokens(keys.Bucket("acme", keys.UserSubject("alice")))
	r := s.sign(alice, newKey(), pngBody)
	mustStatus(t, r, http.StatusTooManyRequests, apierr.CodeTooMany)
	if r.str("scope") != ratelimit.ScopeLiveGrants || retryAfter(t, r) > 120 {
		t.Fatalf("fourth sign: %s", r.raw)
	}
	if after := s.tokens(keys.Bucket("acme", keys.UserSubject("alice"))); after != before {
		t.Fatalf("the refusal spent a token: %s → %s", before, after)
	}
	// One of them uploaded: its slot frees.
	s.rdb.Set(context.Background(), keys.Done("acme", ids[0]), "1", time.Hour)
	if r := s.sign(alice, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("after an upload completed: %d %s", r.status, r.raw)
	}
	mustStatus(t, s.sign(alice, newKey(), pngBody), http.StatusTooManyRequests, apierr.CodeTooMany)
	// Another caller is not held by alice's.
	if r := s.sign(s.token("acme", "bob"), newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("bob: %d %s", r.status, r.raw)
	}
	s.clock.Add(121 * time.Second) // past every URL's life
	if r := s.sign(alice, newKey(), pngBody); r.status != http.StatusCreated {
		t.Fatalf("after the grants expired: %d %s", r.status, r.raw)
	}
}

// racing runs n calls of f at once and counts the statuses they answer.
func racing(n int, f func() int) map[int]int {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[int]int{}
	)
	for range n {
		wg.Go(func() {
			status := f()
			mu.Lock()
			answers[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return answers
}

// 50 signs racing under a bound of 5 open exactly 5.
func TestLiveGrantsExactUnderConcurrency(t *testing.T) {
	env := newStack(t).env(t)
	env["MINTGATE_MAX_LIVE_GRANTS"] = "5"
	env["MINTGATE_TIERS"] = "anonymous=5:5/60s,user=1000:0.001,tenant=100000:0.001"
	s := start(t, env)
	alice := s.token("acme", "alice")
	answers := racing(50, func() int { return s.sign(alice, newKey(), pngBody).status })
	if answers[http.StatusCreated] != 5 || answers[http.StatusTooManyRequests] != 45 {
		t.Fatalf("50 racing signs under a bound of 5: %v", answers)
	}
}
