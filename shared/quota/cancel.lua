-- Cancel, composed after the bucket core and nonces.lua: the signer answered
-- 503 to a request whose Spend timed out, but that EVALSHA may still run (a
-- stalled Redis runs what sits in its sockets when it resumes). Whichever of
-- the two runs first, the request ends with nothing spent and the key not
-- held:
--   pending with this nonce (the Spend ran) -> its token back to every
--     bucket, capped, and the record becomes a tombstone -> 1;
--   absent (the Spend has not run) -> a tombstone, which the Spend finds
--     when it runs and then spends nothing -> 0;
--   a tombstone -> this nonce added to it, unless it names it already, then
--     the first answer again (1 when the tombstone holds this nonce's refund)
--     and nothing touched;
--   anything else (another request's pending or done record) -> nothing
--     touched -> 0: the Spend, when it runs, finds that record and spends
--     nothing either.
-- A tombstone is {state = 'cancelled', nonce = the cancelled nonces (see
-- nonces.lua), refunded = the nonce whose token this tombstone gave back}
-- with a TTL longer than a command can sit in a stalled Redis. It holds
-- several nonces because a client's retries with one key may all be cut by
-- one stall, and their Spends and Cancels then run in any order.
--
-- KEYS: CANCEL_KEYS, the idempotency record and the Spend's buckets; ARGV:
-- CANCEL, the tombstone's TTL, the most nonces it keeps and the core's
-- arguments for a cost of -1 (cancel.go).
-- Returns 1 when this nonce's token was given back, 0 when not.
local idem = KEYS[CANCEL_KEYS.idem]
local rec = redis.call('HMGET', idem, 'state', 'fp', 'nonce', 'refunded')
local nonce, ttl = ARGV[CANCEL.nonce], ARGV[CANCEL.ttl]
if rec[1] == 'pending' then
  if rec[2] ~= ARGV[CANCEL.fp] or rec[3] ~= nonce then return 0 end
  take(KEYS, CANCEL_KEYS.buckets, CANCEL_KEYS.count(#KEYS), ARGV, CANCEL.core)
  redis.call('DEL', idem)
  redis.call('HSET', idem, 'state', 'cancelled', 'nonce', nonce, 'refunded', nonce)
  redis.call('PEXPIRE', idem, ttl)
  return 1
end
if rec[1] == 'cancelled' then
  if holds(rec[3], nonce) then
    if rec[4] == nonce then return 1 end
    return 0
  end
  redis.call('HSET', idem, 'nonce', with(rec[3], nonce, tonumber(ARGV[CANCEL.max])))
elseif rec[1] then
  return 0
else
  redis.call('HSET', idem, 'state', 'cancelled', 'nonce', nonce)
end
redis.call('PEXPIRE', idem, ttl)
return 0
