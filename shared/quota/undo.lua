-- Undo (a sign that issued no URL), composed after the bucket core: the token of an
-- allowed Spend whose URL never left goes back, the idempotency key is freed
-- and the grant is marked refunded, in one atomic step. The refunded marker
-- is shared with the sweeper's refund.lua: whoever comes second finds it and
-- credits nothing, in either order. A landed upload (done marker) is never
-- credited either.
--
-- KEYS[1] idempotency record, KEYS[2] done marker, KEYS[3] refunded marker,
-- KEYS[4..] the Spend's buckets.
-- ARGV[1] request fingerprint, ARGV[2] request nonce, ARGV[3] refunded
-- marker TTL (ms), ARGV[4] the refund record (the marker's value, see
-- refund.lua), ARGV[5..] the core's arguments for a cost of -1.
-- Returns 1 when it refunded, 0 when not.

-- The key is freed only while it is still this very request's in-flight
-- mark: once it expired, another request (a retry of the same request
-- included, with its own nonce) may own it.
local rec = redis.call('HMGET', KEYS[1], 'state', 'fp', 'nonce')
if rec[1] == 'pending' and rec[2] == ARGV[1] and rec[3] == ARGV[2] then
  redis.call('DEL', KEYS[1])
end
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then return 0 end
take(KEYS, 4, #KEYS - 3, ARGV, 5)
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[3])
return 1
