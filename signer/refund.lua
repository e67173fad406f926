-- Undo a sign whose grant could not be recorded (SPEC §2 step 5): give the
-- token back and free the idempotency key, atomically, so a retry with the
-- same key is a fresh request.
--
-- KEYS[1] idempotency record, KEYS[2..] the buckets the sign spent from
-- (caller, tenant, and for an anonymous caller anonymous_all)
-- ARGV[1] request fingerprint, ARGV[2..] the core's arguments, cost -1.
-- The record is only freed while it is still this request's in-flight mark.
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp')
if rec[1] == 'pending' and rec[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return take(KEYS, 2, #KEYS - 1, ARGV, 2)
