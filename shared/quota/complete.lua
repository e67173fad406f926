-- Complete (the completer's, for an ObjectCreated), composed after the bucket
-- core: the done marker is set and, when the grant was refunded before its
-- upload landed (a PUT started before expiry and finished after the due
-- time), the refund is taken back, in one atomic step. Taking back charges
-- the refund record's buckets whatever they hold (owe: below 0 if need be)
-- and turns the refunded marker into 'taken <ms>', keeping its expiry: the
-- marker still stops any later refund or undo, and a second take-back finds
-- nothing to take. From the moment the done marker exists no refund can
-- happen (refund.lua and undo.lua check it first), so the refund record
-- this call sees is the last.
--
-- KEYS[1] done marker, KEYS[2] refunded marker, KEYS[3..] the buckets of the
-- refund record the caller read (none when it read none).
-- ARGV[1] the done marker's value, ARGV[2] its TTL (ms), ARGV[3] '1' to set
-- it only when absent (SET NX), '0' to overwrite, ARGV[4] the refund record
-- the caller read ('' for none), ARGV[5..] the core's arguments for a cost
-- of 1 over KEYS[3..].
-- Returns {the done marker's previous value or nil, 'none' | 'taken'}, or
-- {previous, 'again', record} when the refunded marker holds another record
-- than ARGV[4]: the caller runs it again with that record's buckets.
local prev = redis.call('GET', KEYS[1])
if ARGV[3] ~= '1' or not prev then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
local rec = redis.call('GET', KEYS[2])
if not rec or string.sub(rec, 1, 1) ~= '{' then
  -- Not refunded, taken back already, or a marker from before refund
  -- records: nothing to take.
  return {prev, 'none'}
end
if rec ~= ARGV[4] then return {prev, 'again', rec} end
take(KEYS, 3, #KEYS - 2, ARGV, 5, true)
redis.call('SET', KEYS[2], 'taken ' .. ARGV[5], 'KEEPTTL')
return {prev, 'taken'}
