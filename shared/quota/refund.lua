-- Refund of due grants (the sweeper's), one call per tenant, composed after the
-- bucket core. For each grant in order: its upload landed (done marker) ->
-- 'done', and the done marker is made to live at least as long as a
-- refunded marker, so no later copy of the grant finds neither; it was given
-- back already, by the signer's undo or an earlier delivery (refunded
-- marker) -> 'already'; else one token back to each of its buckets, capped
-- by the shape the grant was issued under (no refill: see take()), and the
-- refunded marker, holding the refund record with what each bucket was
-- actually credited (what the completer takes back should the upload land
-- after all: complete.lua) -> 'refunded'. Grants of one call may share
-- buckets (the tenant's, one caller's twice) or be the same grant twice:
-- each step of the loop sees the state the one before left, so that is
-- exact.
--
-- KEYS, per grant: a GRANT_KEYS record, its done and refunded markers and
-- its n buckets. ARGV: REFUND, the markers' TTL, then per grant a GRANT
-- record: n, the refund record, and the core's arguments for a cost of -1
-- (refund.go).
-- Returns the outcome of each grant, in order.
local ttl = ARGV[REFUND.ttl]
local out, k, a = {}, REFUND_KEYS.grants, REFUND.grants
while a <= #ARGV do
  local n = tonumber(ARGV[a + GRANT.n])
  local done, refunded = KEYS[k + GRANT_KEYS.done], KEYS[k + GRANT_KEYS.refunded]
  if redis.call('EXISTS', done) == 1 then
    redis.call('PEXPIRE', done, ttl, 'GT')
    out[#out + 1] = 'done'
  elseif redis.call('EXISTS', refunded) == 1 then
    out[#out + 1] = 'already'
  else
    -- No buckets: a refund that only ends the grant (a multipart DELETE of
    -- a grant that charged no bytes gives back nothing).
    local moved = {}
    if n > 0 then
      local _, m = take(KEYS, k + GRANT_KEYS.buckets, n, ARGV, a + GRANT.core)
      moved = m
    end
    redis.call('SET', refunded, recorded(ARGV[a + GRANT.record], moved), 'PX', ttl)
    out[#out + 1] = 'refunded'
  end
  k, a = k + GRANT_KEYS.width(n), a + GRANT.width(n)
end
return out
