-- The nonces of a cancelled idempotency record (its field nonce): every
-- request cancelled on the key while it lay cancelled, space-separated,
-- oldest first. Composed in front of spend.lua and cancel.lua; a nonce holds
-- no space (quota checks it).

-- holds reports whether list (an HMGET value: false when missing) names nonce.
local function holds(list, nonce)
  return type(list) == 'string' and string.find(' ' .. list .. ' ', ' ' .. nonce .. ' ', 1, true) ~= nil
end

-- with is list and nonce at its end, keeping the newest max.
local function with(list, nonce, max)
  local out = {}
  if type(list) == 'string' then
    for n in string.gmatch(list, '%S+') do out[#out + 1] = n end
  end
  out[#out + 1] = nonce
  while #out > max do table.remove(out, 1) end
  return table.concat(out, ' ')
end
