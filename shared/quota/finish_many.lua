-- A batch of Finishes of one tenant, composed after finish_fn.lua: each is
-- finish_fn.lua's finish() on its own slice of KEYS and ARGV, in order, so
-- each sees the writes of those before it exactly as if they had run one
-- after another.
--
-- KEYS, per Finish: its idempotency record, then its grant record.
-- ARGV, per Finish: finish.lua's 7 arguments.
-- Returns one reply per Finish, in order: 1, or {'error', message} for a
-- Finish whose commands failed (the others keep theirs, as they would have
-- run alone).
local out, k, a = {}, 1, 1
while a <= #ARGV do
  local ok, r = pcall(finish, KEYS, k, ARGV, a)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {'error', tostring(r)}
  end
  out[#out + 1] = r
  k, a = k + 2, a + 7
end
return out
