-- Complete (the completer's, for an ObjectCreated), composed after the bucket
-- core: the done marker is set and, when the grant was refunded before its
-- upload landed (a PUT started before expiry and finished after the due
-- time), the refund is taken back, in one atomic step. Taking back charges
-- the refund record's buckets whatever they hold (owe: below 0 if need be)
-- and turns the refunded marker into a taken-back one, keeping its expiry: the
-- marker still stops any later refund or undo, and a second take-back finds
-- nothing to take. From the moment the done marker exists no refund can
-- happen (refund.lua and undo.lua check it first), so the refund record
-- this call sees is the last.
--
-- KEYS[1] done marker, KEYS[2] refunded marker, KEYS[3..] the buckets of the
-- refund record the caller read (none when it read none).
-- ARGV[1] the done marker's value, ARGV[2] its TTL (ms), ARGV[3] '1' to set
-- it only when absent (SET NX; a present one lives at least the TTL), '0' to overwrite, ARGV[4] the refund record
-- the caller read ('' for none), ARGV[5..] the core's arguments for a cost
-- of 1 over KEYS[3..].
-- Returns {the done marker's previous value or nil, 'none' | 'taken'}, or
-- {previous, 'again', record} when the refunded marker holds another record
-- than ARGV[4]: the caller runs it again with that record's buckets.
local prev = redis.call('GET', KEYS[1])
if ARGV[3] ~= '1' or not prev then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  -- Kept as it is, but made to live as long as a new one would (one
  -- written by an older completer may be shorter).
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
end
local rec = redis.call('GET', KEYS[2])
-- A refund not taken back reads {"at":<ms>,"buckets":…} (Go writes the
-- fields in this order); taken back, {"at":<ms>,"taken":<ms>}; a marker from
-- before refund records is a bare number. Only the first has anything to take.
local at = rec and string.match(rec, '^{"at":(%d+),"buckets":')
if not at then return {prev, 'none'} end
if rec ~= ARGV[4] then return {prev, 'again', rec} end
take(KEYS, 3, #KEYS - 2, ARGV, 5, true)
redis.call('SET', KEYS[2], '{"at":' .. at .. ',"taken":' .. ARGV[5] .. '}', 'KEEPTTL')
return {prev, 'taken'}
