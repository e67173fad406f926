-- Refund of one due grant (SPEC §4), composed after the bucket core, so the
-- check and the refund are one atomic step: each grant is refunded at most
-- once however many sweepers see it, and never after its upload landed.
--
-- KEYS[1] done marker, KEYS[2] refunded marker,
-- KEYS[3] the caller's bucket (its issuing tier), KEYS[4] the tenant bucket.
-- ARGV[1] refunded marker TTL (ms); ARGV[2..] the core's arguments for a cost
-- of -1: now (ms, also stored as the marker's value), then per bucket its
-- shape, so the refund is capped at the issuing tier's capacity.
if redis.call('EXISTS', KEYS[1]) == 1 then return 'done' end
if redis.call('EXISTS', KEYS[2]) == 1 then return 'already' end
take(KEYS, 3, 2, ARGV, 2)
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[1])
return 'refunded'
