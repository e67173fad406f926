-- Complete (the completer's, for an ObjectCreated), composed after the bucket
-- core: the done marker is set and, when the grant was refunded before its
-- upload landed (a PUT started before expiry and finished after the due
-- time), the refund is taken back, in one atomic step. Taking back charges
-- each of the refund record's buckets exactly what the refund credited it,
-- whatever it holds (owe: below 0 if need be)
-- and turns the refunded marker into a taken-back one, keeping its expiry: the
-- marker still stops any later refund or undo, and a second take-back finds
-- nothing to take. From the moment the done marker exists no refund can
-- happen (refund.lua and undo.lua check it first), so the refund record
-- this call sees is the last.
--
-- KEYS: COMPLETE_KEYS, the done and refunded markers, then the buckets of
-- the refund record the caller read (none when it read none). ARGV:
-- COMPLETE, the done marker's value and TTL, nx ('1' to set it only when
-- absent: SET NX, and a present one lives at least the TTL), the refund
-- record the caller read ('' for none), then the core's arguments for a
-- cost of 1 over those buckets (complete.go).
-- Returns {the done marker's previous value or nil, 'none' | 'taken'}, or
-- {previous, 'again', record} when the refunded marker holds another record
-- than the caller read: the caller runs it again with that record's buckets.
local done, refunded = KEYS[COMPLETE_KEYS.done], KEYS[COMPLETE_KEYS.refunded]
local prev = redis.call('GET', done)
if ARGV[COMPLETE.nx] ~= '1' or not prev then
  redis.call('SET', done, ARGV[COMPLETE.value], 'PX', ARGV[COMPLETE.ttl])
else
  -- Kept as it is, but made to live as long as a new one would (one
  -- written by an older completer may be shorter).
  redis.call('PEXPIRE', done, ARGV[COMPLETE.ttl], 'GT')
end
local rec = redis.call('GET', refunded)
-- A refund not taken back is a record {"at":<ms>,"buckets":[…],"credited":[…]}
-- (older ones lack credited: one unit of cost each); taken back,
-- {"at":<ms>,"taken":<ms>}; a marker from before refund records is a bare
-- number. Only the first has anything to take.
if not rec then return {prev, 'none'} end
local ok, r = pcall(cjson.decode, rec)
if not ok or type(r) ~= 'table' or r.taken ~= nil or type(r.buckets) ~= 'table' or type(r.at) ~= 'number' then
  return {prev, 'none'}
end
if rec ~= ARGV[COMPLETE.record] then return {prev, 'again', rec} end
-- Exactly what the refund credited each bucket, nothing where it credited
-- nothing (a full bucket, an expired key).
local amounts = nil
if type(r.credited) == 'table' then amounts = r.credited end
local n = COMPLETE_KEYS.count(#KEYS)
if n > 0 then take(KEYS, COMPLETE_KEYS.buckets, n, ARGV, COMPLETE.core, true, amounts) end
redis.call('SET', refunded, '{"at":' .. string.format('%.0f', r.at) .. ',"taken":' .. ARGV[COMPLETE.core + CORE.now] .. '}', 'KEEPTTL')
return {prev, 'taken'}
