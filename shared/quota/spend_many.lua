-- A batch of Spends of one tenant, composed after the bucket core, nonces.lua
-- and spend_fn.lua: each is spend_fn.lua's spend() on its own slice of KEYS
-- and ARGV, in order, so each sees the writes of those before it exactly as
-- if they had run one after another. Redis's clock is read once, at the
-- first Spend with a limit, and each Spend checks its own limit against it.
--
-- KEYS, per Spend: its idempotency record, then its n buckets.
-- ARGV, per Spend: n, then spend.lua's ARGV (fingerprint, nonce, in-flight
-- TTL, last Redis time or 0, the core's arguments for a cost of 1 and n
-- shapes).
-- Returns one reply per Spend, in order: spend.lua's reply, or
-- {'error', message} for a Spend whose commands failed (the others keep
-- theirs, as they would have run alone).
local at
local function clock()
  if not at then at = redisMillis() end
  return at
end
local out, k, a = {}, 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local ok, r = pcall(spend, KEYS, k, n, ARGV, a + 1, clock)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {'error', tostring(r)}
  end
  out[#out + 1] = r
  k, a = k + 1 + n, a + 7 + 3 * n
end
return out
