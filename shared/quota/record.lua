-- recorded(rec, moved): the refund record rec (Go's JSON object, complete.go's
-- record, without what it credited) with the tokens the credit actually gave
-- each of its buckets appended as "credited" (moved, take()'s second value,
-- in the record's bucket order, six fractional digits as the buckets keep
-- them). A take-back charges exactly these (complete.lua): a bucket that was
-- full or missing got nothing and owes nothing back.
local function recorded(rec, moved)
  local parts = {}
  for i = 1, #moved do parts[i] = string.format('%.6f', moved[i]) end
  return string.sub(rec, 1, -2) .. ',"credited":[' .. table.concat(parts, ',') .. ']}'
end
