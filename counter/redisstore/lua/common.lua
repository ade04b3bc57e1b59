-- common.lua: the helpers of the counter script. It is not a script of its
-- own: batch.lua is appended to it and the two run as one chunk (Go:
-- luaBatch), so every function here is a local of that chunk. It reads no
-- KEYS or ARGV; batch.lua passes it what it needs.
--
-- Arithmetic: the Lua mirrors package counter (counter/algo.go; the spec is
-- in docs/redis.md) operation for operation. Lua 5.1 numbers are doubles,
-- so every integer here stays exact up to 2^53 (about 285 years of
-- microseconds since 1970, far beyond any Max the store accepts). Redis
-- turns a Lua number into an integer reply by truncation, so every value
-- returned is floored or ceiled explicitly first.
--
-- Units: the counters' time (now, a bucket's ts) is in microseconds, from
-- redis TIME unless a test pins it (see now_us); window starts and ends are
-- whole seconds of that clock; key expiries and TTLs are milliseconds of
-- the Redis clock (real_ms), whatever the test clock; amounts are the
-- caller's units (tokens, requests, micro-USD).
--
-- Per-key state: one string per counter, packed with struct.pack: one byte
-- of tag, then little-endian IEEE doubles, which round-trip every value
-- exactly.
--   token bucket:  '<Bddd' 4, consumed, ts_us, exp_ms   (absent = full)
--   window:        '<Bdd'  2, ws_s, used    (3 for calendar month; an older
--                                            ws or absent = used 0)
-- A bucket stores what it has consumed (units below full, >= 0; above max
-- is debt), never its level, so that the state means the same under any
-- capacity: a limit edited between two operations applies to the usage
-- already counted. Its tag is 4, not the algorithm's 1, because earlier
-- versions stored the level under tag 1; a level is still read (decode, and
-- gstate in batch.lua), as consumed = max - level under the capacity of the
-- operation reading it (what those versions would have reported), and the
-- next write replaces it with tag 4.
-- A bucket's key must live until the bucket is full again, plus 1 s, which
-- moves with every write. exp_ms is the key's expiry as last set (Unix ms,
-- Redis clock): a write whose bucket is full again by then keeps the TTL
-- (SET KEEPTTL); one that needs longer sets it (PXAT) with slack, one
-- period of the bucket between 1 s and 1 h, so that a busy counter sets its
-- TTL about once per period. A bucket that fills up is deleted (absent is
-- full). The value is the only writer of the TTL, so exp_ms is always the
-- key's real expiry. A window's key lives until 1 s past its window's end.
-- A stored state of another algorithm than the debit's counts as absent, as
-- in the memory store. States written by earlier versions, the level-based
-- buckets '<Bddd' 1, level, ts, exp_ms and '<Bdd' 1, level, ts (expiry
-- unknown), and the text format "<alg>|a|b" (a bucket's a is its level),
-- are still read (decode), so counters survive an upgrade; any write
-- replaces them with the current form.
--
-- Atomicity: none of its own; the functions that write (put_bucket,
-- put_window) run inside the one script invocation, which Redis runs
-- without any other command in between.

local floor, ceil = math.floor, math.ceil
-- The clock (see now_us), read when first needed by an invocation.
local now, now_s, real_ms
local pack, unpack_state, byte = struct.pack, struct.unpack, string.byte

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

-- from_level converts the level l of a bucket written by an earlier
-- version (tag 1) to the amount consumed under the capacity max of the
-- operation reading it, which is what that version would have reported:
-- max - l, at least 0 (a level above max, left by a lowered capacity, is
-- a full bucket).
local function from_level(max, l)
  local c = max - l
  if c < 0 then c = 0 end
  return c
end

-- decode returns a stored state (a, b, and for a bucket its key's expiry e
-- in ms, nil when unknown) when raw (a GET/MGET reply) was written by alg,
-- else nil; a bucket's a is the amount consumed, max the capacity of the
-- debit reading it. The formats of earlier versions are read too: the
-- level-based buckets (tag 1, with and without expiry), and text, whose
-- first byte is the algorithm's digit.
local function decode(raw, alg, max)
  if not raw then return nil end
  local t, len = byte(raw, 1), #raw
  local _, a, b, e
  if alg == 1 then
    if t == 4 and len == 25 then
      _, a, b, e = unpack_state('<Bddd', raw)
      return a, b, e
    end
    if t == 1 and len == 25 then
      _, a, b, e = unpack_state('<Bddd', raw)
    elseif t == 1 and len == 17 then
      _, a, b = unpack_state('<Bdd', raw)
    elseif t == 49 then
      local x, y = string.match(raw, '^%d|([^|]+)|(.+)$')
      a, b = tonumber(x), tonumber(y)
      if not a or not b then return nil end
    else
      return nil
    end
    return from_level(max, a), b, e
  end
  if t == alg and len == 17 then
    _, a, b = unpack_state('<Bdd', raw)
    return a, b
  end
  if t == alg + 48 then
    local x, y = string.match(raw, '^%d|([^|]+)|(.+)$')
    if x then return tonumber(x), tonumber(y) end
  end
  return nil
end

-- advance brings a stored state (a, b) to now and returns the current
-- state. Bucket (consumed, ts): drain at max per period, down to 0 (full);
-- a clock that went backwards drains nothing and keeps the later stamp;
-- absent is full. Window (ws, used): a state of another window than the
-- current one (ws), or absent, is the current window, empty.
local function advance(alg, max, per, a, b, now, ws)
  if alg == 1 then
    if a == nil then return 0, now end
    if now <= b then return a, b end
    a = a - (now - b) * max / per
    if a < 0 then a = 0 end
    return a, now
  end
  if a ~= ws then return ws, 0 end
  return a, b
end

-- put_bucket writes a bucket state (consumed c, stamp ts) whose key
-- expires at e (ms; nil when unknown) and returns the value written (false
-- when deleted). A full bucket is the same as absent and is deleted. The
-- TTL is kept when e covers the time until the bucket is full again plus
-- 1 s, else set to that plus slack. real_ms is the Redis clock (see
-- now_us).
local function put_bucket(key, max, per, c, ts, e)
  if c <= 0 then
    redis.call('DEL', key)
    return false
  end
  local need = real_ms + ceil(c * per / max / 1000) + 1000
  if e and e >= need then
    local v = pack('<Bddd', 4, c, ts, e)
    redis.call('SET', key, v, 'KEEPTTL')
    return v
  end
  local slack = floor(per / 1000)
  if slack > 3600000 then slack = 3600000 elseif slack < 1000 then slack = 1000 end
  e = need + slack
  local v = pack('<Bddd', 4, c, ts, e)
  redis.call('SET', key, v, 'PXAT', e)
  return v
end

-- put_window writes a window state (ws, used) with a TTL until 1 s past
-- the end we (s) of its window and returns the value written.
local function put_window(key, alg, ws, used, we)
  local ttl_ms = (we + 1) * 1000 - floor(now / 1000)
  if ttl_ms < 1 then ttl_ms = 1 end
  local v = pack('<Bdd', alg, ws, used)
  redis.call('SET', key, v, 'PX', ttl_ms)
  return v
end

-- now_us reads the clock: redis TIME when spec is empty (production).
-- Tests pass "@<us>" for a fixed time or "+<us>" for TIME plus an offset.
-- It returns the counters' time (µs, and whole s) and the Redis clock in
-- ms, which TTLs follow whatever the spec.
local function now_us(spec)
  local t = redis.call('TIME')
  local real = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local n = real
  local c = string.sub(spec, 1, 1)
  if c == '@' then
    n = tonumber(string.sub(spec, 2))
  elseif c == '+' then
    n = real + tonumber(string.sub(spec, 2))
  end
  return n, floor(n / 1000000), floor(real / 1000)
end
