-- Undo (a sign that issued no URL), composed after the bucket core: the token of an
-- allowed Spend whose URL never left goes back, the idempotency key is freed
-- and the grant is marked refunded, in one atomic step. The refunded marker
-- is shared with the sweeper's refund.lua: whoever comes second finds it and
-- credits nothing, in either order. A landed upload (done marker) is never
-- credited either.
--
-- KEYS: UNDO_KEYS, the idempotency record, the done and refunded markers,
-- the Spend's buckets; ARGV: UNDO, the refund record (the refunded marker's
-- value, see refund.lua) and the core's arguments for a cost of -1
-- (undo.go).
-- Returns 1 when it refunded, 0 when not.

-- The key is freed only while it is still this very request's: its
-- in-flight mark, or the done record of a FinishOwn it gave up on that ran
-- after all (its URL never left, so nothing may replay it). Once the mark
-- expired, another request (a retry of the same request included, with its
-- own nonce) may own it.
local rec = redis.call('HMGET', KEYS[UNDO_KEYS.idem], 'state', 'fp', 'nonce')
if (rec[1] == 'pending' or rec[1] == 'done') and rec[2] == ARGV[UNDO.fp] and rec[3] == ARGV[UNDO.nonce] then
  redis.call('DEL', KEYS[UNDO_KEYS.idem])
end
if redis.call('EXISTS', KEYS[UNDO_KEYS.done], KEYS[UNDO_KEYS.refunded]) > 0 then return 0 end
local _, moved = take(KEYS, UNDO_KEYS.buckets, UNDO_KEYS.count(#KEYS), ARGV, UNDO.core)
redis.call('SET', KEYS[UNDO_KEYS.refunded], recorded(ARGV[UNDO.record], moved), 'PX', ARGV[UNDO.ttl])
return 1
