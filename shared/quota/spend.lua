-- Spend, composed after the bucket core, nonces.lua and spend_fn.lua: one
-- request, spend_fn.lua's spend().
--
-- KEYS[1] idempotency record, KEYS[2..] the buckets (2 or 3).
-- ARGV[1] request fingerprint, ARGV[2] request nonce, ARGV[3] in-flight TTL
-- (ms), ARGV[4] the last Redis time (unix ms) at which this Spend may run, 0
-- for no limit, ARGV[5..] the core's arguments (bucket.Args) for a cost of 1.
-- Returns {'late'} | {'replay', body} | {'reused'} | {'pending'} |
-- {'cancelled'} | the core's reply.
return spend(KEYS, 1, #KEYS - 1, ARGV, 1, redisMillis)
