-- Spend, composed after the bucket core, nonces.lua and spend_fn.lua: one
-- request, spend_fn.lua's spend().
--
-- KEYS: one SPEND_KEYS record, ARGV: one SPEND record (spend.go).
-- Returns {'late'} | {'replay', body} | {'reused'} | {'pending'} |
-- {'cancelled'} | the core's reply.
return spend(KEYS, 1, SPEND_KEYS.count(#KEYS), ARGV, 1, redisMillis)
