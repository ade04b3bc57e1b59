package redisstore

// The Lua scripts mirror the arithmetic of package store (see the spec in
// docs/redis.md): time in microseconds from redis TIME, token bucket levels
// as doubles, window counters as integers. Lua 5.1 numbers are doubles, so
// every integer below stays exact up to 2^53 (about 285 years of microseconds
// since 1970, far beyond any Max we accept).
//
// State is one string per counter, "a|b":
//   token bucket:  "<level>|<ts_us>"   (absent = full)
//   window:        "<ws_s>|<used>"     (older ws or absent = used 0)
// Values are written with %.17g, which round-trips a double exactly; Redis
// would otherwise format numbers with %.14g and lose precision.
//
// Reply integers are produced by truncation (Redis converts a Lua number to
// an integer reply that way), so every value returned is floored or ceiled
// explicitly first.

// luaCommon holds helpers shared by the scripts.
const luaCommon = `
local floor = math.floor

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- month_bounds returns the Unix seconds of 00:00 UTC on the first day of the
-- month holding s, and of the next month.
local function month_bounds(s)
  local z = floor(s / 86400) + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  local ny, nm = y, m + 1
  if nm == 13 then ny, nm = y + 1, 1 end
  return days_from_civil(y, m, 1) * 86400, days_from_civil(ny, nm, 1) * 86400
end

-- window returns the start (s) and end (s) of the window holding now_s.
local function window(alg, per_us, now_s)
  if alg == 3 then return month_bounds(now_s) end
  local per_s = per_us / 1000000
  local ws = floor(now_s / per_s) * per_s
  return ws, ws + per_s
end

local function split(raw)
  local a, b = string.match(raw, '^([^|]+)|(.+)$')
  return tonumber(a), tonumber(b)
end

-- bucket_level refills a bucket to now and returns its level and stamp. A
-- clock that went backwards refills nothing and keeps the later stamp.
local function bucket_level(raw, max, per, now)
  if not raw then return max, now end
  local level, ts = split(raw)
  if now <= ts then
    if level > max then level = max end
    return level, ts
  end
  level = level + (now - ts) * max / per
  if level > max then level = max end
  return level, now
end

-- put_bucket stores a bucket level, or deletes it when full (full is the
-- same as absent). TTL: time to full plus a 1 s margin.
local function put_bucket(key, level, ts, max, per)
  if level >= max then
    redis.call('DEL', key)
    return
  end
  local ttl_ms = math.ceil((max - level) * per / max / 1000) + 1000
  redis.call('SET', key, string.format('%.17g|%.17g', level, ts), 'PX', ttl_ms)
end

-- now_us reads the clock: redis TIME when spec is empty (production).
-- Tests pass "@<us>" for a fixed time or "+<us>" for TIME plus an offset.
local function now_us(spec)
  local c = string.sub(spec, 1, 1)
  local n
  if c == '@' then
    n = tonumber(string.sub(spec, 2))
  else
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if c == '+' then n = n + tonumber(string.sub(spec, 2)) end
  end
  return n, floor(n / 1000000)
end
`

// luaReserve charges (ARGV[1] == "r") or inspects (ARGV[1] == "p") every
// key, all or nothing. ARGV[2] is the clock spec (see now_us). Per key i,
// ARGV[3+4(i-1) ..] = alg, max, period_us, amount. Reply: {allowed, denied
// (0-based, -1 when allowed), retry_us, never, then per key remaining,
// reset_us, window_s}.
const luaReserve = luaCommon + `
local charge = ARGV[1] == 'r'
local now, now_s = now_us(ARGV[2])
local n = #KEYS
local alg, max, per, amt, lvl, ts, ws, we = {}, {}, {}, {}, {}, {}, {}, {}
local denied, retry, never = -1, 0, 0
for i = 1, n do
  local b = 3 + (i - 1) * 4
  local a, m, p, x = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  alg[i], max[i], per[i], amt[i] = a, m, p, x
  local r = redis.call('GET', KEYS[i])
  local ok
  if a == 1 then
    lvl[i], ts[i] = bucket_level(r, m, p, now)
    ok = lvl[i] >= x
    if not ok and denied < 0 then
      denied = i - 1
      if x > m then never = 1 else retry = math.ceil((x - lvl[i]) * p / m) end
    end
  else
    local s, e = window(a, p, now_s)
    ws[i], we[i] = s, e
    local used = 0
    if r then
      local sws, su = split(r)
      if sws == s then used = su end
    end
    lvl[i] = used
    ok = used + x <= m
    if not ok and denied < 0 then
      denied = i - 1
      if x > m then never = 1 else retry = e * 1000000 - now end
    end
  end
end
local allowed = 0
if denied < 0 then
  allowed = 1
  if charge then
    for i = 1, n do
      if amt[i] > 0 then
        if alg[i] == 1 then
          lvl[i] = lvl[i] - amt[i]
          put_bucket(KEYS[i], lvl[i], ts[i], max[i], per[i])
        else
          lvl[i] = lvl[i] + amt[i]
          local ttl_ms = (we[i] + 1) * 1000 - floor(now / 1000)
          redis.call('SET', KEYS[i], string.format('%.17g|%.17g', ws[i], lvl[i]), 'PX', ttl_ms)
        end
      end
    end
  end
end
local out = {allowed, denied, retry, never}
for i = 1, n do
  if alg[i] == 1 then
    local full = 0
    if lvl[i] < max[i] then full = math.ceil((max[i] - lvl[i]) * per[i] / max[i]) end
    out[#out + 1] = floor(lvl[i])
    out[#out + 1] = full
    out[#out + 1] = 0
  else
    out[#out + 1] = max[i] - lvl[i]
    out[#out + 1] = we[i] * 1000000 - now
    out[#out + 1] = ws[i]
  end
end
return out
`

// luaAdjust applies signed deltas. ARGV[1] is the clock spec. Per key i,
// ARGV[2+5(i-1) ..] = alg, max, period_us, window_s (from the ticket), delta.
// Reply: the number of keys changed.
const luaAdjust = luaCommon + `
local now = now_us(ARGV[1])
local changed = 0
for i = 1, #KEYS do
  local b = 2 + (i - 1) * 5
  local a, m, p, w, d = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  if d ~= 0 then
    local r = redis.call('GET', KEYS[i])
    if a == 1 then
      local l, ts = bucket_level(r, m, p, now)
      l = l - d
      if l > m then l = m end
      put_bucket(KEYS[i], l, ts, m, p)
      changed = changed + 1
    elseif r then
      local sws, su = split(r)
      if sws == w then
        su = su + d
        if su < 0 then su = 0 end
        redis.call('SET', KEYS[i], string.format('%.17g|%.17g', sws, su), 'KEEPTTL')
        changed = changed + 1
      end
    end
  end
end
return changed
`
