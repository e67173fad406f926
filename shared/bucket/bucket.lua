-- N-tier token bucket, all or nothing. Composed in front of an
-- entry script (take.lua, or a service's own gate) that calls take().
--
-- keys[k0 .. k0+n-1]: bucket hashes {t = tokens "%.6f", ts = ms}.
-- argv[a0] = now (ms, the caller's clock), argv[a0+1] = cost (negative refunds),
-- then per bucket: capacity, refill per second, idle ttl (ms).
-- Returns {allowed, remaining, limit, reset_s, retry_s, blocked, scarcest}
-- where blocked and scarcest are 1-based bucket positions (0: none).
local function take(keys, k0, n, argv, a0)
  local now = tonumber(argv[a0])
  local cost = tonumber(argv[a0 + 1])
  local tok, cap, rate, ttl, stamp = {}, {}, {}, {}, {}
  for i = 1, n do
    local b = a0 + 2 + (i - 1) * 3
    cap[i], rate[i], ttl[i] = tonumber(argv[b]), tonumber(argv[b + 1]), argv[b + 2]
    local st = redis.call('HMGET', keys[k0 + i - 1], 't', 'ts')
    local t, ts = tonumber(st[1]), tonumber(st[2])
    stamp[i] = argv[a0]
    if t == nil or ts == nil then
      t = cap[i]
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
  if cost > 0 then
    for i = 1, n do
      if tok[i] < cost then
        allowed = 0
        local wait = math.ceil((cost - tok[i]) / rate[i])
        if blocked == 0 or wait > retry then blocked, retry = i, wait end
      end
    end
  end

  local scarcest = 1
  for i = 1, n do
    if allowed == 1 then
      tok[i] = math.max(0, math.min(cap[i], tok[i] - cost))
    end
    local key = keys[k0 + i - 1]
    redis.call('HSET', key, 't', string.format('%.6f', tok[i]), 'ts', stamp[i])
    redis.call('PEXPIRE', key, ttl[i])
    if tok[i] < tok[scarcest] then scarcest = i end
  end

  local s = scarcest
  return {allowed, math.floor(tok[s]), cap[s], math.ceil((cap[s] - tok[s]) / rate[s]), retry, blocked, s}
end
