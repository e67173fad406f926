-- Finish a sign once its grant is in the ledger, as a
-- function: the idempotency record becomes done with the 201 body, and the
-- grant record that GET /uploads/{urlId} reads is written, in one step. It
-- moves no tokens, so it does not compose the bucket core. finish.lua calls
-- it once, finish_many.lua once per finish of a batch, in order.
--
-- A cancelled record (cancel.lua) is left as it is: Finish follows an
-- allowed Spend of its own request, so the key's in-flight mark expired and
-- another request was cancelled on it since, whose Spend may yet run and
-- must find the tombstone. The URL still leaves, without a replay record.
--
-- keys[k0] idempotency record, keys[k0+1] grant record.
-- argv[a0] fingerprint, argv[a0+1] nonce, argv[a0+2] body, argv[a0+3]
-- record TTL (ms), argv[a0+4] expiresAt (ms), argv[a0+5] subject,
-- argv[a0+6] grant record TTL (ms).
local function finish(keys, k0, argv, a0)
  if redis.call('HGET', keys[k0], 'state') ~= 'cancelled' then
    redis.call('HSET', keys[k0], 'state', 'done', 'fp', argv[a0], 'nonce', argv[a0 + 1], 'body', argv[a0 + 2])
    redis.call('PEXPIRE', keys[k0], argv[a0 + 3])
  end
  redis.call('HSET', keys[k0 + 1], 'expiresAt', argv[a0 + 4], 'subject', argv[a0 + 5])
  redis.call('PEXPIRE', keys[k0 + 1], argv[a0 + 6])
  return 1
end
