-- Close a multipart grant: the claim that makes its complete (the signer's)
-- and its abort (a DELETE's or the sweeper's) exclude each other, so that
-- they never race at S3, which may let both succeed. It moves no tokens.
--
-- The closing record is a hash: n, the completes in progress; lease, the
-- Redis time (ms) the last of their leases ends; abort, set once an abort
-- claimed the grant, for good. A complete killed mid-way never releases:
-- its lease ends it.
--
-- Mode 'complete': done marker -> 'done'; refunded marker or an abort's
-- claim -> 'closed'; else one more complete, its lease ending lease ms
-- from now at the earliest -> 'ok'.
-- Mode 'abort': done marker -> 'done'; refunded marker (ended before: a
-- DELETE, an earlier sweep, the create's undo) -> 'refunded', nothing
-- written; a complete in progress within its lease -> {'busy', ms until
-- the lease ends}; else the abort's claim is written and the record lives
-- the markers' TTL -> 'ok'.
-- Mode 'release': one complete fewer (its complete failed and created
-- nothing); none left ends the lease -> 'ok'.
--
-- KEYS: CLOSE_KEYS; ARGV: CLOSE (close.go).
-- Returns {outcome, ms}.
local done, refunded, rec = KEYS[CLOSE_KEYS.done], KEYS[CLOSE_KEYS.refunded], KEYS[CLOSE_KEYS.closing]
local mode = ARGV[CLOSE.mode]
local st = redis.call('HMGET', rec, 'abort', 'n', 'lease')
local n, ends = tonumber(st[2]) or 0, tonumber(st[3]) or 0
if mode == 'release' then
  if n <= 1 then
    redis.call('HSET', rec, 'n', 0, 'lease', 0)
  else
    redis.call('HSET', rec, 'n', n - 1)
  end
  return {'ok', 0}
end
if redis.call('EXISTS', done) == 1 then return {'done', 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if mode == 'complete' then
  if st[1] or redis.call('EXISTS', refunded) == 1 then return {'closed', 0} end
  local lease = tonumber(ARGV[CLOSE.lease])
  redis.call('HSET', rec, 'n', n + 1, 'lease', string.format('%.0f', math.max(ends, now + lease)))
  if redis.call('PTTL', rec) < lease then redis.call('PEXPIRE', rec, lease) end
  return {'ok', 0}
end
if redis.call('EXISTS', refunded) == 1 then return {'refunded', 0} end
if n > 0 and ends > now then return {'busy', ends - now} end
redis.call('HSET', rec, 'abort', string.format('%.0f', now))
redis.call('PEXPIRE', rec, ARGV[CLOSE.ttl])
return {'ok', 0}
