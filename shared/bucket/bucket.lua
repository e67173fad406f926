-- N-tier token bucket, all or nothing. Composed in front of an
-- entry script (a service's own gate, or the tests' take.lua) that calls take().
--
-- keys from k (CORE_KEYS): the n bucket hashes {t = tokens "%.6f", ts = ms}.
-- argv from a (CORE): now (ms, the caller's clock), cost (negative refunds),
-- then per bucket a SHAPE: capacity, refill per second, idle ttl (ms), and
-- units: 0 for a bucket of requests, which each unit of cost takes one
-- token from; above 0 for a bucket of bytes, which each unit of cost takes
-- units tokens from (a sign's contentLength). The headers' figures (the
-- scarcest) are of the request buckets alone.
-- owe (a Lua argument, never ARGV): charge cost > 0 whatever the buckets
-- hold, below 0 if need be (a refund taken back: the bucket owes and
-- refills from there).
-- amounts (a Lua argument, with owe): the tokens to charge each bucket, in
-- place of cost × units: what the refund being taken back credited it.
-- Returns {allowed, remaining, limit, reset_s, retry_s, blocked, scarcest}
-- where blocked and scarcest are 1-based bucket positions (0: none), then
-- the whole tokens each bucket of bytes holds after the step, in order;
-- and, as a second value, the tokens the step moved in each bucket (what a
-- credit gave: a refund records it, so a take-back charges exactly that).
--
-- A credit (a refund, cost < 0) or a charge that owes comes with the shape
-- of the grant it is about, which may not be the bucket's current one (a
-- tier changed since): so it never refills. It moves the stored tokens by
-- exactly its units (a credit capped at the shape's capacity, and none into
-- a missing key: that is a full bucket) and keeps the stored stamp, so the
-- time since the last spend is refilled once, by the next spend, at the
-- bucket's shape then. It never shortens the key's expiry.
local function take(keys, k, n, argv, a, owe, amounts)
  local now = tonumber(argv[a + CORE.now])
  local cost = tonumber(argv[a + CORE.cost])
  local credit = cost < 0
  local tok, cap, rate, ttl, stamp, missing, need, bytes = {}, {}, {}, {}, {}, {}, {}, {}
  for i = 1, n do
    local b = CORE.item(a, i)
    cap[i], rate[i], ttl[i] = tonumber(argv[b + SHAPE.capacity]), tonumber(argv[b + SHAPE.rate]), tonumber(argv[b + SHAPE.ttl])
    local units = tonumber(argv[b + SHAPE.units])
    need[i], bytes[i] = cost, units > 0
    if bytes[i] then need[i] = cost * units end
    if amounts then need[i] = tonumber(amounts[i]) end
    local st = redis.call('HMGET', keys[CORE_KEYS.item(k, i)], 't', 'ts')
    local t, ts = tonumber(st[1]), tonumber(st[2])
    stamp[i] = argv[a + CORE.now]
    if t == nil or ts == nil then
      t, missing[i] = cap[i], true
    elseif credit or owe then
      stamp[i] = st[2]
    elseif now > ts then
      t = math.min(cap[i], t + (now - ts) * rate[i] / 1000)
    else
      -- A clock that went backwards adds nothing, and keeping the later
      -- stamp means the same interval is never credited twice.
      stamp[i] = st[2]
    end
    tok[i] = t
  end

  local allowed, blocked, retry = 1, 0, 0
  if cost > 0 and not owe then
    for i = 1, n do
      if tok[i] < need[i] then
        allowed = 0
        local wait = math.ceil((need[i] - tok[i]) / rate[i])
        if blocked == 0 or wait > retry then blocked, retry = i, wait end
      end
    end
  end

  local scarcest, moved = 0, {}
  for i = 1, n do
    local was = tok[i]
    if owe then
      tok[i] = tok[i] - need[i]
    elseif credit then
      if tok[i] < cap[i] and not missing[i] then tok[i] = math.min(cap[i], tok[i] - need[i]) end
    elseif allowed == 1 then
      tok[i] = math.max(0, math.min(cap[i], tok[i] - need[i]))
    end
    moved[i] = math.abs(tok[i] - was)
    -- A missing key is a full bucket, of whatever shape: a credit has
    -- nothing to add, and writing this shape's capacity could lower it; a
    -- charge of nothing (a take-back of a credit that gave nothing) leaves
    -- it missing.
    if not ((credit or (owe and need[i] == 0)) and missing[i]) then
      local key = keys[CORE_KEYS.item(k, i)]
      -- The key may expire only once the bucket would be full again: a
      -- bucket that owes needs the time to climb back to 0 on top.
      local life = ttl[i]
      if tok[i] < 0 then life = life + math.ceil(-tok[i] * 1000 / rate[i]) end
      if credit or owe then
        local left = redis.call('PTTL', key)
        if left > life then life = left end
      end
      redis.call('HSET', key, 't', string.format('%.6f', tok[i]), 'ts', stamp[i])
      redis.call('PEXPIRE', key, life)
    end
    if not bytes[i] and (scarcest == 0 or tok[i] < tok[scarcest]) then scarcest = i end
  end

  local s = scarcest
  if s == 0 then s = 1 end
  local out = {allowed, math.max(0, math.floor(tok[s])), cap[s], math.ceil((cap[s] - tok[s]) / rate[s]), retry, blocked, s}
  -- Then what each bucket of bytes holds, in order (for the headers).
  for i = 1, n do
    if bytes[i] then out[#out + 1] = math.max(0, math.floor(tok[i])) end
  end
  return out, moved
end
