-- One Spend (a sign's decision) as a function, composed after the bucket core
-- and nonces.lua: the idempotency check, the all-or-nothing spend and the
-- in-flight mark are one atomic step. spend.lua calls it once, spend_many.lua
-- once per spend of a batch, in order.
--
-- keys from k: SPEND_KEYS (spend.go): the idempotency record (hash: state =
-- pending|done|cancelled, fp, nonce, body; see cancel.lua for a cancelled
-- one), then the n buckets: the caller's, the tenant's, and for an
-- anonymous caller the tenant's anonymous_all bucket (2 or 3 of them).
-- argv from a: SPEND, its core's arguments for a cost of 1. clock() is
-- Redis's time in unix ms; it is called only for a Spend with a limit.
-- Returns {'late'} | {'replay', body} | {'reused'} | {'pending'} |
-- {'cancelled'} | {'live', seconds until a live grant ends} | the core's
-- reply.
local function spend(keys, k, n, argv, a, clock)
  local last = tonumber(argv[a + SPEND.last])
  -- Ran after its caller gave up (a stalled Redis running what sat in its
  -- sockets): touch nothing.
  if last > 0 and clock() > last then
    return {'late'}
  end
  local idem = keys[k + SPEND_KEYS.idem]
  local rec = redis.call('HMGET', idem, 'state', 'fp', 'body', 'nonce')
  if rec[1] == 'cancelled' then
    -- This very request was cancelled (its signer answered 503 and gave up
    -- on it) before this call ran: spend nothing. Any other request passes, as
    -- if the key were free: a tombstone never blocks a client's retry.
    if holds(rec[4], argv[a + SPEND.nonce]) then return {'cancelled'} end
  elseif rec[1] then
    if rec[2] ~= argv[a + SPEND.fp] then return {'reused'} end
    if rec[1] == 'done' then return {'replay', rec[3]} end
    return {'pending'}
  end
  -- The live-grants bound: the caller's set, pruned of the grants past
  -- their life and of those whose done or refunded marker exists (keys of
  -- this tenant's hash tag, so of this slot), must hold fewer than max.
  local live, lmax, luntil, donep, refp, lkey = argv[a + SPEND.live]
  local now = tonumber(argv[a + SPEND.core + CORE.now])
  if live ~= '' then
    lmax, luntil, donep, refp, lkey = string.match(live, '^(%d+)|(%d+)|([^|]*)|([^|]*)|(.+)$')
    redis.call('ZREMRANGEBYSCORE', lkey, '-inf', now)
    for _, id in ipairs(redis.call('ZRANGE', lkey, 0, -1)) do
      if redis.call('EXISTS', donep .. id, refp .. id) > 0 then redis.call('ZREM', lkey, id) end
    end
    if redis.call('ZCARD', lkey) >= tonumber(lmax) then
      local first = redis.call('ZRANGE', lkey, 0, 0, 'WITHSCORES')
      return {'live', math.ceil((tonumber(first[2]) - now) / 1000)}
    end
  end
  local r = take(keys, k + SPEND_KEYS.buckets, n, argv, a + SPEND.core)
  if r[1] == 1 then
    redis.call('DEL', idem)
    redis.call('HSET', idem, 'state', 'pending', 'fp', argv[a + SPEND.fp], 'nonce', argv[a + SPEND.nonce])
    redis.call('PEXPIRE', idem, argv[a + SPEND.in_flight])
    if live ~= '' then
      redis.call('ZADD', lkey, luntil, argv[a + SPEND.nonce])
      local life = tonumber(luntil) - now
      if redis.call('PTTL', lkey) < life then redis.call('PEXPIRE', lkey, life) end
    end
  end
  return r
end

-- redisMillis is Redis's clock (TIME) in unix ms. TIME is allowed in
-- scripts since Redis 5 replicates their effects, not the scripts.
local function redisMillis()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
