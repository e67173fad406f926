-- Finish a sign once its grant is in the ledger (SPEC §2 step 6): the
-- idempotency record becomes done with the 201 body, and the grant record
-- that GET /uploads/{urlId} reads is written, in one step. It moves no
-- tokens, so it does not compose the bucket core.
--
-- KEYS[1] idempotency record, KEYS[2] grant record
-- ARGV[1] fingerprint, ARGV[2] body, ARGV[3] record TTL (ms),
-- ARGV[4] expiresAt (ms), ARGV[5] subject, ARGV[6] grant record TTL (ms).
redis.call('HSET', KEYS[1], 'state', 'done', 'fp', ARGV[1], 'body', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], 'expiresAt', ARGV[4], 'subject', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return 1
