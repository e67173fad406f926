-- Refund of due grants (the sweeper's), one call per tenant, composed after the
-- bucket core. For each grant in order: its upload landed (done marker) ->
-- 'done', and the done marker is made to live at least as long as a
-- refunded marker, so no later copy of the grant finds neither; it was given
-- back already, by the signer's undo or an earlier delivery (refunded
-- marker) -> 'already'; else one token back to each of its buckets, capped
-- by the shape the grant was issued under, and the refunded marker, holding
-- the refund record (what the completer takes back should the upload land
-- after all: complete.lua) -> 'refunded'. Grants of one call may share
-- buckets (the tenant's, one caller's twice) or be the same grant twice:
-- each step of the loop sees the state the one before left, so that is
-- exact.
--
-- KEYS, per grant: done marker, refunded marker, then its n buckets.
-- ARGV[1] marker TTL (ms); then per grant: n, the refund record, and the
-- core's arguments for a cost of -1 (bucket.Args): now (ms), -1, and n
-- shapes.
-- Returns the outcome of each grant, in order.
local out, k, a = {}, 1, 2
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  if redis.call('EXISTS', KEYS[k]) == 1 then
    redis.call('PEXPIRE', KEYS[k], ARGV[1], 'GT')
    out[#out + 1] = 'done'
  elseif redis.call('EXISTS', KEYS[k + 1]) == 1 then
    out[#out + 1] = 'already'
  else
    take(KEYS, k + 2, n, ARGV, a + 2)
    redis.call('SET', KEYS[k + 1], ARGV[a + 1], 'PX', ARGV[1])
    out[#out + 1] = 'refunded'
  end
  k, a = k + 2 + n, a + 4 + 3 * n
end
return out
