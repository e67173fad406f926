-- Finish, composed after finish_fn.lua: one sign, finish_fn.lua's finish().
--
-- KEYS[1] idempotency record, KEYS[2] grant record
-- ARGV[1] fingerprint, ARGV[2] nonce, ARGV[3] body, ARGV[4] record TTL (ms),
-- ARGV[5] expiresAt (ms), ARGV[6] subject, ARGV[7] grant record TTL (ms).
return finish(KEYS, 1, ARGV, 1)
