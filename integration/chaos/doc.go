// Package chaos is mintgate's fault soak: two signers, two sweepers and the
// completer, built as binaries, against real Redis (append-only, fsync
// always), nats-server (one server, and a three-node cluster with an R3
// ledger stream), versitygw, the S3→SQS bridge and fauxqs. Clients sign
// with retries on the same Idempotency-Key and upload about half the URLs
// while processes are killed, paused and restarted at random times drawn
// from a seed; afterwards the test checks, from Redis and the HTTP answers
// alone, that every token came back exactly when it should, and every
// byte of the tiers of bytes, which each grant spends its contentLength
// from (check_test.go, byteExcess).
//
// One request in five is a multipart grant (multipart_test.go) of a small
// object, which its client completes, abandons to the sweeper or aborts
// with DELETE; the check adds S3 (a HEAD of each grant's key and the
// uploads still listed) to tell that each ended exactly one way: completed
// and never refunded, or without an object, its upload aborted and its
// refund given once.
//
// The completer's verification gate is on (bodies_test.go, verdicts_test.go):
// every object declared image/png starts with a real PNG, but one single
// PUT in eight uploads HTML. Once settled, every done marker holds a final
// verdict: each wrong upload rejected:type_mismatch, in quarantine and
// never refunded, its tokens and bytes spent like any upload's; each right
// one completed; and no urlId has both a completed and a rejected event on
// the MINTGATE_UPLOADS stream.
//
// The completer delivers every event as a webhook (webhooks_test.go) to a
// receiver that verifies it with the standardwebhooks npm library and
// answers 503 to a share of the tries drawn from the seed: after the load
// drains, every event was delivered at least once, verified, none with a
// wrong signature and none kept as failed.
//
// The short form runs with go test (make test); make chaos runs the long
// one (-chaos.long). -chaos.seed repeats a run's schedule of faults and
// requests.
package chaos
