-- Spend (SPEC §2 step 2), composed after the bucket core and nonces.lua: the
-- idempotency check, the all-or-nothing spend and the in-flight mark are one
-- atomic step.
--
-- KEYS[1] idempotency record (hash: state = pending|done|cancelled, fp,
-- nonce, body; see cancel.lua for a cancelled one), KEYS[2..] the buckets:
-- the caller's, the tenant's, and for an anonymous caller the tenant's
-- anonymous_all bucket (2 or 3 of them).
-- ARGV[1] request fingerprint, ARGV[2] request nonce, ARGV[3] in-flight TTL
-- (ms), ARGV[4] the last Redis time (unix ms) at which this Spend may run, 0
-- for no limit, ARGV[5..] the core's arguments (bucket.Args) for a cost of 1.
-- Returns {'late'} | {'replay', body} | {'reused'} | {'pending'} |
-- {'cancelled'} | the core's reply.
local last = tonumber(ARGV[4])
if last > 0 then
  -- Ran after its caller gave up (a stalled Redis running what sat in its
  -- sockets): touch nothing. TIME is allowed in scripts since Redis 5
  -- replicates their effects, not the scripts.
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > last then
    return {'late'}
  end
end
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'body', 'nonce')
if rec[1] == 'cancelled' then
  -- This very request was cancelled (its signer answered 503 and gave up
  -- on it) before this call ran: spend nothing. Any other request passes, as
  -- if the key were free: a tombstone never blocks a client's retry.
  if holds(rec[4], ARGV[2]) then return {'cancelled'} end
elseif rec[1] then
  if rec[2] ~= ARGV[1] then return {'reused'} end
  if rec[1] == 'done' then return {'replay', rec[3]} end
  return {'pending'}
end
local r = take(KEYS, 2, #KEYS - 1, ARGV, 5)
if r[1] == 1 then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1], 'nonce', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return r
