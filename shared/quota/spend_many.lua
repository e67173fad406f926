-- A batch of Spends of one tenant, composed after the bucket core, nonces.lua
-- and spend_fn.lua: each is spend_fn.lua's spend() on its own slice of KEYS
-- and ARGV, in order, so each sees the writes of those before it exactly as
-- if they had run one after another. Redis's clock is read once, at the
-- first Spend with a limit, and each Spend checks its own limit against it.
--
-- KEYS, per Spend: a SPEND_KEYS record; ARGV, per Spend: a BATCHED_SPEND
-- record, its bucket count n and then spend.lua's ARGV (spend_many.go).
-- Returns one reply per Spend, in order: spend.lua's reply, or
-- {'error', message} for a Spend whose commands failed (the others keep
-- theirs, as they would have run alone).
local at
local function clock()
  if not at then at = redisMillis() end
  return at
end
local out, k, a = {}, SPEND_MANY_KEYS.spends, SPEND_MANY.spends
while a <= #ARGV do
  local n = tonumber(ARGV[a + BATCHED_SPEND.n])
  local ok, r = pcall(spend, KEYS, k, n, ARGV, a + BATCHED_SPEND.spend, clock)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {'error', tostring(r)}
  end
  out[#out + 1] = r
  k, a = k + SPEND_KEYS.width(n), a + BATCHED_SPEND.width(n)
end
return out
