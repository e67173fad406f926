package main

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/mintgate/mintgate/signer/internal/apierr"
	"github.com/mintgate/mintgate/signer/internal/identity"
	"github.com/mintgate/mintgate/signer/internal/request"
)

// flood is how a run of identical requests from one address was answered.
type flood struct {
	decided int           // answered by the signer's decision (the status and code asked for)
	limited int           // 429 too_many_requests: refused at the address, before Redis
	calls   int64         // the Redis commands the run cost
	elapsed time.Duration // how long it took
}

// floodFrom sends n requests with send and sorts their answers: decided
// ones (status, and code unless empty) and 429 too_many_requests with an
// integer Retry-After; anything else fails the test.
func floodFrom(t *testing.T, s *signer, n int, send func() reply, status int, code string) flood {
	t.Helper()
	before, began := redisCalls(t, s), time.Now()
	var f flood
	for range n {
		r := send()
		switch {
		case r.status == status && (code == "" || r.code() == code):
			f.decided++
		case r.status == http.StatusTooManyRequests && r.code() == apierr.CodeTooManyReads:
			if ra, err := strconv.Atoi(r.header.Get(apierr.HeaderRetryAfter)); err != nil || ra < 1 || r.body["retryAfter"] != float64(ra) {
				t.Fatalf("429 too_many_requests with Retry-After %q: %s", r.header.Get(apierr.HeaderRetryAfter), r.raw)
			}
			f.limited++
		default:
			t.Fatalf("%d %s, want %d %s or 429 %s", r.status, r.raw, status, code, apierr.CodeTooManyReads)
		}
	}
	f.elapsed, f.calls = time.Since(began), redisCalls(t, s)-before
	return f
}

// atMost is how many requests a bucket of burst tokens refilling rate a
// second lets through in d: its burst and what came back meanwhile.
func atMost(burst, rate float64, d time.Duration) int {
	return int(burst) + int(math.Ceil(rate*d.Seconds())) + 1
}

// check fails the test unless at most burst (and the refill of rate a
// second) of f were decided, and the limited ones cost Redis nothing:
// every command is one a decided request paid, each costing at most per.
func (f flood) check(t *testing.T, what string, burst, rate float64, per int64) {
	t.Helper()
	t.Logf("%s: %d decided, %d limited in %v, %d Redis commands (%d each)", what, f.decided, f.limited, f.elapsed, f.calls, per)
	if limit := atMost(burst, rate, f.elapsed); f.decided > limit {
		t.Errorf("%s: %d reached the decision in %v, want at most %d (MINTGATE_READ_LIMIT)", what, f.decided, f.elapsed, limit)
	}
	if f.calls > per*int64(f.decided) {
		t.Errorf("%s: %d Redis commands for %d decided, want at most %d: the limited ones reached Redis", what, f.calls, f.decided, per*int64(f.decided))
	}
}

// from is the header naming client address ip, which the signer believes
// from the tests' own address (addressEnv).
func from(ip string) []string { return []string{identity.HeaderForwardedFor, ip} }

// addressEnv is a signer's environment that believes X-Forwarded-For from
// the tests' own address, so that each test client has its own address.
func addressEnv(t *testing.T, st stack, tiers string) map[string]string {
	t.Helper()
	env := st.env(t)
	env["MINTGATE_IP_SOURCE"] = "xff"
	env["MINTGATE_TRUSTED_PROXIES"] = "127.0.0.1"
	env["MINTGATE_TIERS"] = tiers
	return env
}

// Review issue 28, item 5: 200 same-key replays of a sign from one address
// were all answered, each a script and its RateLimit reads in Redis. Now
// they are bounded per address by MINTGATE_READ_LIMIT (default 30:10): at
// most its burst and refill reach Redis, the rest are 429
// too_many_requests with Retry-After and cost Redis nothing. Another
// address, and its replays, are served as before.
func TestSignReplaysAreBoundedPerAddress(t *testing.T) {
	s := start(t, addressEnv(t, newStack(t), "anonymous=5:5/60s,user=30:0.5,tenant=600:10"), withoutRedisClock)
	alice, bob := s.token("acme", "alice"), s.token("acme", "bob")
	key := newKey()
	if r := s.sign(alice, key, pngBody, from("198.51.100.7")...); r.status != http.StatusCreated {
		t.Fatalf("first sign: %d %s", r.status, r.raw)
	}
	replay := func() reply { return s.sign(alice, key, pngBody, from("198.51.100.7")...) }
	one := floodFrom(t, s, 1, replay, http.StatusOK, "")
	if one.decided != 1 {
		t.Fatal("the first replay was not answered")
	}
	f := floodFrom(t, s, 200, replay, http.StatusOK, "")
	f.decided++ // the first replay spent from the same bucket
	f.check(t, "200 replays", 30, 10, one.calls)
	if f.limited == 0 {
		t.Fatal("no replay was limited")
	}

	// Another address: a fresh sign and its replays are served.
	bobKey := newKey()
	if r := s.sign(bob, bobKey, pngBody, from("198.51.100.8")...); r.status != http.StatusCreated {
		t.Fatalf("a fresh caller from another address: %d %s", r.status, r.raw)
	}
	if r := s.sign(bob, bobKey, pngBody, from("198.51.100.8")...); r.status != http.StatusOK || r.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("its replay: %d %s", r.status, r.raw)
	}
}

// A refused sign — 429 by a bucket, 422 for a reused key, 409 for a key in
// flight — costs Redis a script and spends no token: 200 of each from one
// address reach Redis only as often as MINTGATE_READ_LIMIT allows. A fresh
// caller from another address is served.
func TestRefusedSignsAreBoundedPerAddress(t *testing.T) {
	s := start(t, addressEnv(t, newStack(t), "anonymous=5:5/60s,user=2:0.001,tenant=600:10"), withoutRedisClock)
	for i, tc := range []struct {
		name, code string
		status     int
		setup      func(ip string) func() reply
	}{
		{"429 by the caller's bucket", apierr.CodeTooMany, http.StatusTooManyRequests, func(ip string) func() reply {
			tok := s.token("acme", "alice")
			for range 2 {
				if r := s.sign(tok, newKey(), pngBody, from(ip)...); r.status != http.StatusCreated {
					t.Fatalf("sign within the bucket: %d %s", r.status, r.raw)
				}
			}
			return func() reply { return s.sign(tok, newKey(), pngBody, from(ip)...) }
		}},
		{"422 for a reused key", apierr.CodeKeyReused, http.StatusUnprocessableEntity, func(ip string) func() reply {
			tok, key := s.token("acme", "bob"), newKey()
			if r := s.sign(tok, key, pngBody, from(ip)...); r.status != http.StatusCreated {
				t.Fatalf("first sign: %d %s", r.status, r.raw)
			}
			return func() reply { return s.sign(tok, key, `{"contentType":"image/png","contentLength":2048}`, from(ip)...) }
		}},
		{"409 for a key in flight", apierr.CodeInProgress, http.StatusConflict, func(ip string) func() reply {
			tok, key := s.token("acme", "carol"), newKey()
			s.holdInFlight("acme", "carol", key)
			return func() reply { return s.sign(tok, key, pngBody, from(ip)...) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send := tc.setup(fmt.Sprintf("198.51.100.%d", 10+i))
			one := floodFrom(t, s, 1, send, tc.status, tc.code)
			f := floodFrom(t, s, 200, send, tc.status, tc.code)
			f.decided++
			f.check(t, "200 × "+tc.name, 30, 10, one.calls)
			if f.limited == 0 {
				t.Fatal("none was limited")
			}
		})
	}
	if r := s.sign(s.token("acme", "dave"), newKey(), pngBody, from("198.51.100.99")...); r.status != http.StatusCreated {
		t.Fatalf("a fresh caller from another address: %d %s", r.status, r.raw)
	}
}

// The address's bucket never limits fresh signs, which spend from their
// own buckets in Redis: 40 from one address under a read limit of 5 are
// all issued. Their replays then are limited at 5.
func TestFreshSignsSpendNoReadLimit(t *testing.T) {
	env := addressEnv(t, newStack(t), "anonymous=5:5/60s,user=100:0.001,tenant=600:10")
	env["MINTGATE_READ_LIMIT"] = "5:5/60s"
	s := start(t, env, withoutRedisClock)
	tok := s.token("acme", "alice")
	var keys []string
	for i := range 40 {
		k := newKey()
		if r := s.sign(tok, k, pngBody, from("198.51.100.7")...); r.status != http.StatusCreated {
			t.Fatalf("fresh sign %d: %d %s", i+1, r.status, r.raw)
		}
		keys = append(keys, k)
	}
	replayed := 0
	for _, k := range keys {
		r := s.sign(tok, k, pngBody, from("198.51.100.7")...)
		switch {
		case r.status == http.StatusOK:
			replayed++
		case r.status == http.StatusTooManyRequests && r.code() == apierr.CodeTooManyReads:
		default:
			t.Fatalf("replay: %d %s", r.status, r.raw)
		}
	}
	if replayed > 5 {
		t.Errorf("%d of 40 replays answered, want at most 5", replayed)
	}
}

// A multipart create is bounded as a sign is: its same-key replays from one
// address past MINTGATE_READ_LIMIT are 429 too_many_requests, as
// api/openapi.yaml describes.
func TestMultipartCreateReplaysAreBoundedPerAddress(t *testing.T) {
	s := startMultipart(t, map[string]string{"MINTGATE_READ_LIMIT": "5:5/60s"})
	alice, key := s.token("acme", "alice"), newKey()
	if r := s.create(alice, key, 12*mib); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	f := floodFrom(t, s.signer, 50, func() reply { return s.create(alice, key, 12*mib) }, http.StatusOK, "")
	if f.decided > 5 || f.limited != 50-f.decided {
		t.Errorf("50 create replays: %d answered, %d limited; want at most 5 answered", f.decided, f.limited)
	}
	c := &apiCheck{t: t, doc: loadAPI(t), seen: map[string]bool{}}
	c.expect(http.StatusTooManyRequests, http.MethodPost, "/uploads/multipart", s.create(alice, key, 12*mib))
}

// Review issue 36, item 7: replays and refusals were charged to the
// address, so one user hammering from a shared address (a corporate NAT,
// an app's backend) locked every other user there out of signing: 429
// too_many_requests before their own buckets were asked. Now an
// authenticated caller's replays and refusals are charged to that caller:
// alice's 100 replays and 100 refusals from 198.51.100.7 are limited, bob
// at the same address still signs and replays, alice's limit holds. Two
// anonymous callers at one address share its bucket as before.
func TestOneCallerCannotLockOutAnotherAtItsAddress(t *testing.T) {
	env := addressEnv(t, newStack(t), "anonymous=100:0.001,user=2:0.001,tenant=600:10")
	env["MINTGATE_READ_LIMIT"] = "5:5/60s"
	s := start(t, env, withoutRedisClock)
	addr := from("198.51.100.7")
	alice, bob := s.token("acme", "alice"), s.token("acme", "bob")
	key := newKey()
	if r := s.sign(alice, key, pngBody, addr...); r.status != http.StatusCreated {
		t.Fatalf("alice's sign: %d %s", r.status, r.raw)
	}
	replays := floodFrom(t, s, 100, func() reply { return s.sign(alice, key, pngBody, addr...) }, http.StatusOK, "")
	refusals := floodFrom(t, s, 100, func() reply { return s.sign(alice, newKey(), pngBody, addr...) }, http.StatusTooManyRequests, apierr.CodeTooMany)
	if got := replays.decided + refusals.decided; got > 5 || replays.limited+refusals.limited < 195 {
		t.Fatalf("alice's replays and refusals: %d answered, %d limited; want at most 5 answered", got, replays.limited+refusals.limited)
	}
	bobKey := newKey()
	if r := s.sign(bob, bobKey, pngBody, addr...); r.status != http.StatusCreated {
		t.Fatalf("bob at alice's address: %d %s, want 201", r.status, r.raw)
	}
	if r := s.sign(bob, bobKey, pngBody, addr...); r.status != http.StatusOK || r.header.Get(request.HeaderReplayed) != "true" {
		t.Fatalf("bob's replay: %d %s", r.status, r.raw)
	}
	if r := s.sign(alice, key, pngBody, from("198.51.100.8")...); r.status != http.StatusTooManyRequests || r.code() != apierr.CodeTooManyReads {
		t.Fatalf("alice from another address: %d %s, want her own limit", r.status, r.raw)
	}

	// Anonymous callers are known only by their address: they share it.
	anon := func(ip, key string) reply {
		return s.do(http.MethodPost, "/uploads/sign", map[string]string{identity.HeaderTenant: "pub", "Content-Type": "application/json", identity.HeaderForwardedFor: ip, request.HeaderIdempotencyKey: key}, pngBody)
	}
	anonKey := newKey()
	if r := anon("198.51.100.20", anonKey); r.status != http.StatusCreated {
		t.Fatalf("anonymous sign: %d %s", r.status, r.raw)
	}
	f := floodFrom(t, s, 20, func() reply { return anon("198.51.100.20", anonKey) }, http.StatusOK, "")
	if f.decided > 5 || f.limited == 0 {
		t.Fatalf("anonymous replays: %d answered, %d limited", f.decided, f.limited)
	}
	if r := anon("198.51.100.20", newKey()); r.status != http.StatusTooManyRequests || r.code() != apierr.CodeTooManyReads {
		t.Fatalf("another anonymous caller at that address: %d %s, want 429 %s", r.status, r.raw, apierr.CodeTooManyReads)
	}
}
