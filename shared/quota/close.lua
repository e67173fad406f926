-- Close a multipart grant: the claim that makes its complete (the signer's)
-- and its abort (a DELETE's or the sweeper's) exclude each other, so that
-- they never race at S3, which may let both succeed. It moves no tokens.
--
-- The closing record is a hash: one field per complete in progress, its
-- nonce -> the Redis time (ms) its lease ends, and the field 'abort' once an
-- abort claimed the grant, for good.
--
-- Mode 'complete': done marker -> 'done'; refunded marker or an abort's
-- claim -> 'closed'; else this complete's lease is written -> 'ok'.
-- Mode 'abort': done marker -> 'done'; a complete's lease still running ->
-- {'busy', ms until the last lease ends}; else the abort's claim is written
-- and the record lives the markers' TTL -> 'ok'.
-- Mode 'release': this complete's lease is removed (its complete failed and
-- created nothing) -> 'ok'.
--
-- KEYS: CLOSE_KEYS; ARGV: CLOSE (layouts.go).
-- Returns {outcome, ms}.
local done, refunded, rec = KEYS[CLOSE_KEYS.done], KEYS[CLOSE_KEYS.refunded], KEYS[CLOSE_KEYS.closing]
local mode, nonce = ARGV[CLOSE.mode], ARGV[CLOSE.nonce]
if mode == 'release' then
  redis.call('HDEL', rec, nonce)
  return {'ok', 0}
end
if redis.call('EXISTS', done) == 1 then return {'done', 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if mode == 'complete' then
  if redis.call('EXISTS', refunded) == 1 or redis.call('HEXISTS', rec, 'abort') == 1 then
    return {'closed', 0}
  end
  local lease = tonumber(ARGV[CLOSE.lease])
  redis.call('HSET', rec, nonce, now + lease)
  if redis.call('PTTL', rec) < lease then redis.call('PEXPIRE', rec, lease) end
  return {'ok', 0}
end
local fields = redis.call('HGETALL', rec)
local last = 0
for i = 1, #fields, 2 do
  if fields[i] ~= 'abort' then
    local ends = tonumber(fields[i + 1])
    if ends and ends > now and ends > last then last = ends end
  end
end
if last > 0 then return {'busy', last - now} end
redis.call('HSET', rec, 'abort', now)
redis.call('PEXPIRE', rec, ARGV[CLOSE.ttl])
return {'ok', 0}
