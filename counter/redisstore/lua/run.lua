-- run.lua: the end of the counter script (Go: luaBatch; appended to
-- common.lua, batch.lua and lease.lua). It decodes the operations of
-- ARGV[2] in order (headers as described in batch.lua) and runs each under
-- pcall, so that one that fails fails alone. Reply: per operation its reply,
-- or a one-element array holding its error message.

local args = ARGV[2]
local out = {}
local pos, base, k = 1, 0, 0
local last = #args
while pos <= last do
  local kind, n, size
  kind, n, size, pos = unpack_state('<BHI4', args, pos)
  local ok, r
  local nkeys = n
  local grouped = kind == 4 or kind == 5 or kind == 6 or kind >= 8
  if grouped then nkeys = 1 end
  if kind == 9 then
    ok, r = pcall(lease_reserve, base, n, args, pos)
  elseif kind == 10 then
    ok, r = pcall(lease_release, base, n, args, pos)
  elseif kind == 3 or kind == 6 or kind == 7 or kind == 8 then
    ok, r = pcall(adjust, base, n, args, pos, grouped, kind >= 7)
  else
    ok, r = pcall(reserve, base, n, kind == 1 or kind == 4, args, pos, grouped)
  end
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = {tostring(r)}
  end
  k = k + 1
  out[k] = r
  base = base + nkeys
  pos = pos + size
end
return out
