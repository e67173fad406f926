-- Spend (SPEC §2 step 2), composed after the bucket core: the idempotency
-- check, the all-or-nothing spend and the in-flight mark are one atomic step.
--
-- KEYS[1] idempotency record (hash: state = pending|done, fp, body)
-- KEYS[2..] the buckets: the caller's, the tenant's, and for an anonymous
-- caller the tenant's anonymous_all bucket (2 or 3 of them)
-- ARGV[1] request fingerprint, ARGV[2] in-flight TTL (ms), ARGV[3..] the
-- core's arguments (bucket.Args) for a cost of 1.
-- Returns {'replay', body} | {'reused'} | {'pending'} | the core's reply.
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'body')
if rec[1] then
  if rec[2] ~= ARGV[1] then return {'reused'} end
  if rec[1] == 'done' then return {'replay', rec[3]} end
  return {'pending'}
end
local r = take(KEYS, 2, #KEYS - 1, ARGV, 3)
if r[1] == 1 then
  redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return r
