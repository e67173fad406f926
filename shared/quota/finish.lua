-- Finish a sign once its grant is in the ledger (SPEC §2 step 6): the
-- idempotency record becomes done with the 201 body, and the grant record
-- that GET /uploads/{urlId} reads is written, in one step. It moves no
-- tokens, so it does not compose the bucket core.
--
-- A cancelled record (cancel.lua) is left as it is: Finish follows an
-- allowed Spend of its own request, so the key's in-flight mark expired and
-- another request was cancelled on it since, whose Spend may yet run and
-- must find the tombstone. The URL still leaves, without a replay record.
--
-- KEYS[1] idempotency record, KEYS[2] grant record
-- ARGV[1] fingerprint, ARGV[2] nonce, ARGV[3] body, ARGV[4] record TTL (ms),
-- ARGV[5] expiresAt (ms), ARGV[6] subject, ARGV[7] grant record TTL (ms).
if redis.call('HGET', KEYS[1], 'state') ~= 'cancelled' then
  redis.call('HSET', KEYS[1], 'state', 'done', 'fp', ARGV[1], 'nonce', ARGV[2], 'body', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
redis.call('HSET', KEYS[2], 'expiresAt', ARGV[5], 'subject', ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
return 1
