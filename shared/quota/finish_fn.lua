-- Finish a sign once its grant is in the ledger, as a
-- function: the idempotency record becomes done with the 201 body, and the
-- grant record that GET /uploads/{urlId} reads (with a multipart grant's
-- record, which its parts, complete and abort read) is written, in one step. It
-- moves no tokens, so it does not compose the bucket core. finish.lua calls
-- it once, finish_many.lua once per finish of a batch, in order.
--
-- A cancelled record (cancel.lua) is left as it is: Finish follows an
-- allowed Spend of its own request, so the key's in-flight mark expired and
-- another request was cancelled on it since, whose Spend may yet run and
-- must find the tombstone. The URL still leaves, without a replay record.
--
-- keys from k: FINISH_KEYS, the idempotency record and the grant record;
-- argv from a: FINISH (layouts.go).
local function finish(keys, k, argv, a)
  local idem, grant = keys[k + FINISH_KEYS.idem], keys[k + FINISH_KEYS.grant]
  if redis.call('HGET', idem, 'state') ~= 'cancelled' then
    redis.call('HSET', idem, 'state', 'done', 'fp', argv[a + FINISH.fp], 'nonce', argv[a + FINISH.nonce], 'body', argv[a + FINISH.body])
    redis.call('PEXPIRE', idem, argv[a + FINISH.record_ttl])
  end
  redis.call('HSET', grant, 'expiresAt', argv[a + FINISH.expires_at], 'subject', argv[a + FINISH.subject])
  if argv[a + FINISH.multipart] ~= '' then
    redis.call('HSET', grant, 'multipart', argv[a + FINISH.multipart])
  end
  redis.call('PEXPIRE', grant, argv[a + FINISH.grant_ttl])
  return 1
end
