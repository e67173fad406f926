-- One Spend (a sign's decision) as a function, composed after the bucket core
-- and nonces.lua: the idempotency check, the all-or-nothing spend and the
-- in-flight mark are one atomic step. spend.lua calls it once, spend_many.lua
-- once per spend of a batch, in order.
--
-- keys from k: SPEND_KEYS (spend.go): the idempotency record (hash: state =
-- pending|done|cancelled, fp, nonce, body; see cancel.lua for a cancelled
-- one), the LIVE_KEYS record (the caller's live set), then the n buckets:
-- the caller's, the tenant's, and for an anonymous caller the tenant's
-- anonymous_all bucket (2 or 3 of them). argv from a: SPEND, with its
-- LIVE record (the live-grants bound) and its core's arguments for a cost
-- of 1. clock() is Redis's time in unix ms; it is called only for a Spend
-- with a limit.
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
  -- The live-grants bound (max 0: none): the caller's set, pruned of the
  -- grants past their life and of those whose done or refunded marker
  -- exists, must hold fewer than max. The markers are the one kind of key
  -- not in KEYS: which urlIds are live is known only here, by the set's
  -- read, so each is built from its prefix (ARGV, LIVE). The prefixes carry
  -- the tenant's hash tag, as every key of the call does, so these keys are
  -- of the slot of the declared ones: Redis Cluster runs the script on
  -- the node that owns them.
  local lkey = keys[k + SPEND_KEYS.live + LIVE_KEYS.set]
  local lmax = tonumber(argv[a + SPEND.live + LIVE.max])
  local now = tonumber(argv[a + SPEND.core + CORE.now])
  if lmax > 0 then
    local donep, refp = argv[a + SPEND.live + LIVE.done_prefix], argv[a + SPEND.live + LIVE.refunded_prefix]
    redis.call('ZREMRANGEBYSCORE', lkey, '-inf', now)
    for _, id in ipairs(redis.call('ZRANGE', lkey, 0, -1)) do
      if redis.call('EXISTS', donep .. id, refp .. id) > 0 then redis.call('ZREM', lkey, id) end
    end
    if redis.call('ZCARD', lkey) >= lmax then
      local first = redis.call('ZRANGE', lkey, 0, 0, 'WITHSCORES')
      return {'live', math.ceil((tonumber(first[2]) - now) / 1000)}
    end
  end
  local r = take(keys, k + SPEND_KEYS.buckets, n, argv, a + SPEND.core)
  if r[1] == 1 then
    redis.call('DEL', idem)
    redis.call('HSET', idem, 'state', 'pending', 'fp', argv[a + SPEND.fp], 'nonce', argv[a + SPEND.nonce])
    redis.call('PEXPIRE', idem, argv[a + SPEND.in_flight])
    if lmax > 0 then
      local ends = argv[a + SPEND.live + LIVE.ends]
      redis.call('ZADD', lkey, ends, argv[a + SPEND.nonce])
      local life = tonumber(ends) - now
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
