-- Finish, composed after finish_fn.lua: one sign, finish_fn.lua's finish().
--
-- KEYS: one FINISH_KEYS record, ARGV: one FINISH record (layouts.go).
return finish(KEYS, 1, ARGV, 1)
