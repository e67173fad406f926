-- A batch of Finishes of one tenant, composed after finish_fn.lua: each is
-- finish_fn.lua's finish() on its own slice of KEYS and ARGV, in order, so
-- each sees the writes of those before it exactly as if they had run one
-- after another.
--
-- KEYS, per Finish: a FINISH_KEYS record; ARGV, per Finish: a FINISH record
-- (layouts.go).
-- Returns one reply per Finish, in order: 1, or {'error', message} for a
-- Finish whose commands failed (the others keep theirs, as they would have
-- run alone).
local out, k, a = {}, FINISH_MANY_KEYS.finishes, FINISH_MANY.finishes
while a <= #ARGV do
  local ok, r = pcall(finish, KEYS, k, ARGV, a)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {'error', tostring(r)}
  end
  out[#out + 1] = r
  k, a = k + FINISH_KEYS.width(), a + FINISH.width()
end
return out
