-- capacity.lua: one replica's capacity lease on one target, taken, renewed
-- or returned atomically (the script runs without any other command in
-- between).
--
-- KEYS[1]  the target's hash (hash-tagged): one field per replica, its value
--          "held_requests|held_tokens|demand_requests|demand_tokens|expiry_ms"
--          (held: the lease recorded for it; expiry: Unix ms, Redis clock).
-- ARGV[1]  the replica id
-- ARGV[2]  "renew" or "release"
-- ARGV[3]  capacity: requests (0: unbounded, not leased)
-- ARGV[4]  capacity: tokens (0: unbounded, not leased)
-- ARGV[5]  requests the replica holds now     ARGV[6]  tokens it holds now
-- ARGV[7]  requests it demands (held+queued)  ARGV[8]  tokens it demands
-- ARGV[9]  TTL, ms
-- ARGV[10] the clock, Unix ms ("" : redis TIME; tests pin it)
--
-- renew drops every expired lease, water-fills each bounded dimension of the
-- capacity over the live replicas' demands (this one's included), grants
-- this replica min(entitlement, capacity - the other live leases) and
-- records max(grant, held): what it still holds stays counted until it
-- ends. A replica holds no more than its last recorded lease, so the sum of
-- the live leases never exceeds the capacity; the one exception is a
-- replica whose lease expired while its requests ran (a replica cut off
-- from Redis longer than the TTL): it is recorded with what it really
-- holds, above the capacity if need be, so that the others are granted
-- nothing more until it drains. The hash lives at least twice the TTL past
-- the last renewal. Reply: {granted requests, granted tokens, entitlement
-- requests, entitlement tokens, live replicas}.
-- release deletes the replica's field. Reply: 1 if it was there.

local key, me, op = KEYS[1], ARGV[1], ARGV[2]
if op == 'release' then
  return redis.call('HDEL', key, me)
end

local floor, min, max = math.floor, math.min, math.max
local now = tonumber(ARGV[10])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
end
local cap = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local held = {max(tonumber(ARGV[5]), 0), max(tonumber(ARGV[6]), 0)}
local dem = {tonumber(ARGV[7]), tonumber(ARGV[8])}
local ttl = tonumber(ARGV[9])

-- The live replicas: ids sorted, each one's recorded lease and demand.
local ids, lease, want = {}, {}, {}
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local id = all[i]
  if id ~= me then
    local a, b, c, d, e = string.match(all[i + 1], '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    local exp = tonumber(e)
    if not exp or exp <= now then
      redis.call('HDEL', key, id)
    else
      ids[#ids + 1] = id
      lease[id] = {tonumber(a) or 0, tonumber(b) or 0}
      want[id] = {tonumber(c) or 0, tonumber(d) or 0}
    end
  end
end
ids[#ids + 1] = me
want[me] = dem
table.sort(ids)
local n = #ids

-- waterfill returns replica me's entitlement in dimension k: a replica
-- demanding less than an equal share of what is left gets its demand, the
-- others share the rest (a remainder goes to those demanding most, ties by
-- id: the last served get it); what nobody demands is divided equally, the
-- remainder one unit each in id order.
local function waterfill(k)
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(x, y)
    local dx, dy = want[ids[x]][k], want[ids[y]][k]
    if dx ~= dy then return dx < dy end
    return x < y
  end)
  local ent, left = {}, cap[k]
  for j = 1, n do
    local i = order[j]
    local give = min(max(want[ids[i]][k], 0), floor(left / (n - j + 1)))
    ent[i] = give
    left = left - give
  end
  local mine
  for i = 1, n do
    local e = ent[i] + floor(left / n)
    if i <= left % n then e = e + 1 end
    if ids[i] == me then mine = e end
  end
  return mine
end

local granted, ent, rec = {0, 0}, {0, 0}, {0, 0}
for k = 1, 2 do
  if cap[k] > 0 then
    local others = 0
    for i = 1, n do
      if ids[i] ~= me then others = others + lease[ids[i]][k] end
    end
    local free = max(cap[k] - others, 0)
    ent[k] = waterfill(k)
    granted[k] = min(ent[k], free)
    rec[k] = max(granted[k], held[k])
  end
end
redis.call('HSET', key, me, rec[1] .. '|' .. rec[2] .. '|' .. dem[1] .. '|' .. dem[2] .. '|' .. (now + ttl))
if redis.call('PTTL', key) < 2 * ttl then
  redis.call('PEXPIRE', key, 2 * ttl)
end
return {granted[1], granted[2], ent[1], ent[2], n}
