-- batch.lua: the counter operations of the one counter script (Go:
-- luaBatch, which is common.lua, this file, lease.lua and run.lua run as
-- one chunk; run.lua decodes the operations and calls the functions here
-- and in lease.lua). The script runs several independent operations (one
-- per store call) in one
-- invocation, in order, each as if it were a script call of its own: a
-- later operation sees the earlier ones' writes, and an operation that
-- fails (a Lua or command error, trapped by pcall) fails alone.
--
-- Atomicity: Redis runs the invocation as a whole, with no other client's
-- command in between, so a reserve's check-then-charge over all its keys is
-- all or nothing, also against other gateways charging the same counters,
-- and no client sees a half-applied operation. All keys of
-- the batch are read with one MGET; the only other commands are at most one
-- TIME (read when first needed, so the operations of a batch share one
-- instant: they were concurrent calls) and one SET or DEL per key written.
--
-- KEYS: the operations' keys, concatenated: n per operation, or one (the
-- group's) for an operation over a group. All keys of one invocation hash
-- to one Redis Cluster slot (the Go side groups calls by slot).
--
-- ARGV[1]: the clock spec (see now_us in common.lua): empty in production.
-- ARGV[2]: per operation a header, struct '<BHI4': kind (1 reserve, 2 peek,
-- 3 adjust; 4, 5, 6 the same over a group; 7, 8 a charge copied back from
-- the local fallback: an adjust that may start the current window, per key
-- and over a group; 9, 10 a lease reserve and a lease release over a group,
-- see lease.lua), its number of debits n and the size of what follows,
-- then per debit: for reserve and peek the little-endian doubles alg, max,
-- period_us, amount (32 bytes, see packReserve); for adjust and charge alg,
-- max, period_us, window_s, delta (40 bytes, see packAdjust). Over a group,
-- reserve and peek add the counter's id and its key of the per-key layout
-- ('<dH' then the key, see packReserve; read when the group does not exist
-- yet, so that counters charged before groups carry over), and adjust and
-- charge the id. alg is 1 token bucket, 2 fixed window, 3 calendar month;
-- amounts and deltas are in the caller's units, periods in microseconds,
-- window starts in seconds.
--
-- Reply: per operation, in order, its reply or, if it failed, a one-element
-- array holding the error message.
--
-- Reserve and peek: check every key, then charge all (reserve, when all are
-- affordable) or none. A key listed twice is charged twice, the later debit
-- seeing the earlier one's charge (as in the memory store) unless it is
-- under another algorithm (then it counts as absent). Reply: one string of
-- little-endian doubles (see fillResult): allowed, denied (0-based, -1 when
-- allowed), retry_us, never, then per key remaining, reset_us, window_s.
-- Per debit the state lives in one flat table st (see reserve).
--
-- Adjust: apply signed deltas in order. A bucket is refilled, then consumed
-- += delta, at least 0 (absent counts as full). A window changes only while
-- its stored window is the ticket's: used = max(0, used + delta), TTL kept
-- (so with per-key counters the clock is read only if a bucket changes; a
-- group's slots need it to tell which have expired). A key listed twice
-- sees its earlier adjustment. Reply: the number of keys changed.
--
-- Group state: the counters of one group (counter.Debit.Group: one policy
-- instance's counters of one scope, which a request charges together) are
-- kept in one string, so that an operation reads and writes one key however
-- many counters it charges: '<Bd' 5, e (the key's expiry as last set, Unix
-- ms), then per counter a 33-byte slot '<dBddd' id, tag, a, b, z. id
-- identifies the counter (52 bits of a hash of its key, see counterID),
-- tag, a and b are as in a per-key state (common.lua; a bucket's tag is 4,
-- 1 is an earlier version's level), and z is until when the slot must be
-- kept, as a key of its own would be (1 s past the time its bucket is full
-- again or its window ends). A counter is found by id, so slots need no
-- fixed order and counters added to or removed from a policy leave the
-- others alone. A write drops the slots whose z has passed (the same as
-- absent) and deletes a group left with none; the key's TTL follows the
-- latest z as a bucket key's does. Slots of tag 6 and 7 are leases
-- (lease.lua): every operation over a group ends those that expired
-- (gsweep) before it reads a counter, and a bucket counts the units its
-- leases hold (H) beside what it consumed.

local clock = ARGV[1]
local mws, mwe    -- the current month, once computed
local raw = redis.call('MGET', unpack(KEYS))
-- cur: key -> its value as written by this batch so far (false: deleted).
local cur = {}
-- st and rep are reused by every reserve of the batch: only their first
-- entries, written by the current operation, are read.
local st, rep = {}, {}

-- fmt returns the struct format of k doubles, cached in fmts.
local fmts = {}
local function fmt(k)
  local f = fmts[k]
  if not f then
    f = '<' .. string.rep('d', k)
    fmts[k] = f
  end
  return f
end

-- pack_doubles packs t[1..k] as little-endian doubles: at once up to 200
-- (unpack's values go on the Lua stack), else in parts.
local function pack_doubles(t, k)
  if k <= 200 then return pack(fmt(k), unpack(t, 1, k)) end
  local parts = {}
  for i = 1, k, 200 do
    local j = math.min(i + 199, k)
    parts[#parts + 1] = pack(fmt(j - i + 1), unpack(t, i, j))
  end
  return table.concat(parts)
end

local function read(base, i, key)
  local v = cur[key]
  if v == nil then v = raw[base + i] end
  return v
end

-- Groups. G holds the slots of the group being operated on, decoded from
-- its value: five entries per slot (id, tag, a, b, z), gn slots; ge is the
-- group key's expiry as last set (ms), nil when unknown. A slot's tag is
-- its algorithm, except a bucket's: 4 (consumed), or 1 for the level an
-- earlier version wrote.
local G, gn, ge = {}, 0, nil
local gfmts = {}

-- gfind returns the slot of counter id in G, 0 when it has none.
local function gfind(id)
  for s = 1, gn do
    if G[s * 5 - 4] == id then return s end
  end
  return 0
end

-- H: per counter id, the units held by the live bucket leases of the group
-- being operated on (slots of tag 7, see lease.lua), which a bucket's
-- reservations count beside what it consumed; NOH (never written) when the
-- group holds no lease.
local NOH = {}
local H = NOH

-- gsweep ends the leases of G (slots of tag 6 and 7, see lease.lua) whose
-- expiry z (ms of the counter clock) has passed, and sums the holds of the
-- others in H. A window lease (6) gives its outstanding units (a) back to
-- its counter (the counter id in b) while the counter still holds the
-- lease's window, which started before z and ended at z or later (a lease
-- never outlives its window); a bucket lease (7) was never charged, so it
-- just ends. An ended lease's slot is emptied (z 0, dropped by the next
-- gsave). An operation that writes no value leaves the sweep unsaved; the
-- next one repeats it from the same stored value.
local function gsweep()
  local now_ms = floor(now / 1000)
  H = {}
  for q = 5, gn * 5, 5 do
    local t = G[q - 3]
    if t == 6 or t == 7 then
      if G[q] <= now_ms then
        local c = gfind(G[q - 1]) * 5
        if t == 6 and c > 0 and (G[c - 3] == 2 or G[c - 3] == 3) and G[c - 2] * 1000 < G[q] then
          local used = G[c - 1] - G[q - 2]
          if used < 0 then used = 0 end
          G[c - 1] = used
        end
        G[q] = 0
      elseif t == 7 then
        local id = G[q - 1]
        H[id] = (H[id] or 0) + G[q - 2]
      end
    end
  end
end

-- gload decodes a group value (a GET/MGET reply) into G, ending the leases
-- that expired and summing the holds (gsweep; the caller has read the
-- clock); false when there is none (absent, or not a group value).
local function gload(raw)
  gn, ge, H = 0, nil, NOH
  if not raw then return false end
  local len = #raw
  if byte(raw, 1) ~= 5 or (len - 9) % 33 ~= 0 then return false end
  local _, e, p = unpack_state('<Bd', raw)
  local k, leases = 0, false
  while p <= len do
    G[k + 1], G[k + 2], G[k + 3], G[k + 4], G[k + 5], p = unpack_state('<dBddd', raw, p)
    if G[k + 2] >= 6 then leases = true end
    k = k + 5
  end
  gn, ge = k / 5, e
  if leases then gsweep() end
  return true
end

-- gstate returns the state (a, b) that slot s holds for a counter of
-- algorithm alg and capacity max, nil when it holds none: no slot (s 0), a
-- slot of another algorithm, or one whose z has passed (or that this batch
-- emptied: z 0), the same as an expired or deleted key. A bucket's a is the
-- amount consumed (an earlier version's level is converted, see
-- from_level).
local function gstate(s, alg, max)
  if s == 0 then return nil end
  local q = s * 5
  if G[q] <= real_ms then return nil end
  local t = G[q - 3]
  if t == alg then
    if alg ~= 1 then return G[q - 2], G[q - 1] end
    return from_level(max, G[q - 2]), G[q - 1]
  end
  if t == 4 and alg == 1 then return G[q - 2], G[q - 1] end
  return nil
end

-- gslot returns q, the index of the last entry of slot s (z; its id is at
-- q - 4) of counter id, appending a slot when it has none (s 0).
local function gslot(s, id)
  if s == 0 then
    gn = gn + 1
    s = gn
    G[s * 5 - 4] = id
  end
  return s * 5
end

-- gpack returns the group value of G (gn slots) with expiry e: at once up
-- to 39 slots (unpack's values go on the Lua stack), else in parts.
local function gpack(e)
  if gn <= 39 then
    local f = gfmts[gn]
    if not f then
      f = '<Bd' .. string.rep('dBddd', gn)
      gfmts[gn] = f
    end
    return pack(f, 5, e, unpack(G, 1, gn * 5))
  end
  local parts = {pack('<Bd', 5, e)}
  for s = 1, gn, 39 do
    local t = math.min(s + 38, gn)
    parts[#parts + 1] = pack('<' .. string.rep('dBddd', t - s + 1), unpack(G, s * 5 - 4, t * 5))
  end
  return table.concat(parts)
end

-- A slot's z is until when (Redis clock, ms) it must be kept, as a key of
-- its own would be: 1 s past the time it is empty (the same as absent).
-- bucket_z: 1 s past the time a bucket that consumed c is full again; a
-- full bucket is dropped at once (as its key would be deleted).
local function bucket_z(max, per, c)
  if c <= 0 then return 0 end
  return real_ms + ceil(c * per / max / 1000) + 1000
end

-- window_z: 1 s past the end we (s, counter clock) of a window.
local function window_z(we)
  return real_ms + we * 1000 - floor(now / 1000) + 1000
end

-- gsave writes G as the value of gkey, dropping the slots whose z has
-- passed (a full bucket, an ended window: the same as absent); a group left
-- with none is deleted. The key must live until the latest z: the TTL is
-- kept when the stored expiry covers that, else set with slack (see
-- put_bucket; slack is the longest period of the buckets just written,
-- between 1 s and 1 h; none when no bucket was written, so that a group of
-- windows expires 1 s past its last window's end, as a window key does).
local function gsave(gkey, slack)
  if not now then now, now_s, real_ms = now_us(clock) end
  local k, zmax = 0, 0
  local skew = real_ms - floor(now / 1000)
  for q = 5, gn * 5, 5 do
    local z = G[q]
    -- A lease's z is on the counter clock; on the Redis clock it is z + skew
    -- (the same in production).
    local zr = z
    if G[q - 3] >= 6 then zr = z + skew end
    if zr > real_ms then
      if k < q - 5 then
        G[k + 1], G[k + 2], G[k + 3], G[k + 4], G[k + 5] = G[q - 4], G[q - 3], G[q - 2], G[q - 1], z
      end
      k = k + 5
      if zr > zmax then zmax = zr end
    end
  end
  gn = k / 5
  if gn == 0 then
    redis.call('DEL', gkey)
    cur[gkey] = false
    return
  end
  local need = zmax
  local v
  if ge and ge >= need then
    v = gpack(ge)
    redis.call('SET', gkey, v, 'KEEPTTL')
  else
    if slack > 3600000 then slack = 3600000 elseif slack > 0 and slack < 1000 then slack = 1000 end
    ge = need + slack
    v = gpack(ge)
    redis.call('SET', gkey, v, 'PXAT', ge)
  end
  cur[gkey] = v
end

-- window_of returns the current window (start, end; s) of a window
-- counter of algorithm a and period p (µs); 0, 0 for a bucket.
local function window_of(a, p)
  if a == 3 then
    if not mws then mws, mwe = month_bounds(now_s) end
    return mws, mwe
  elseif a == 2 then
    local per_s = p / 1000000
    -- whole weeks start on Monday (1970-01-05, 345600 s after the epoch)
    local off = 0
    if per_s % 604800 == 0 then off = 345600 end
    local ws = floor((now_s - off) / per_s) * per_s + off
    return ws, ws + per_s
  end
  return 0, 0
end

-- reserve is a reserve (charge true) or a peek over n debits, each with a
-- key of its own, or over a group (grouped): the counters are slots of the
-- operation's only key (see gload), found by id. Per debit st holds at
-- 12(i-1): alg, max, per, window end (s), base a, base b, after-charge a,
-- after-charge b, whether this is the counter's last occurrence (the one
-- written), the counter (its key, or its id in a group), then with keys
-- whether the key already holds a state of the current window (then its
-- TTL, until 1 s past the window's end, is already right: the write is SET
-- KEEPTTL, with no TTL to compute) and a bucket key's expiry; in a group,
-- the counter's slot (0: none yet).
local function reserve(base, n, charge, args, pos, grouped)
  if not now then now, now_s, real_ms = now_us(clock) end
  local gkey, present
  if grouped then
    gkey = KEYS[base + 1]
    present = gload(read(base, 1, gkey))
  else
    H = NOH
  end
  local denied, retry, never, slack = -1, 0, 0, 0
  for i = 1, n do
    local a, m, p, x, ident, kl, kpos
    if grouped then
      a, m, p, x, ident, kl, pos = unpack_state('<dddddH', args, pos)
      kpos = pos
      pos = pos + kl
    else
      a, m, p, x, pos = unpack_state('<dddd', args, pos)
      ident = KEYS[base + i]
    end
    local ws, we = window_of(a, p)
    local o = (i - 1) * 12
    local ba, bb, ca, cb, e, s
    local same = false
    local j = 0
    for q = i - 1, 1, -1 do
      if st[(q - 1) * 12 + 10] == ident then j = q break end
    end
    if j > 0 then
      -- The earlier debit's charge is what this one sees, unless it was
      -- under another algorithm: that state counts as absent.
      local oj = (j - 1) * 12
      st[oj + 9] = false
      if grouped then s = st[oj + 11] end
      if st[oj + 1] == a then
        ba, bb, ca, cb, e = st[oj + 5], st[oj + 6], st[oj + 7], st[oj + 8], st[oj + 12]
      else
        ca, cb = advance(a, m, p, nil, nil, now, ws)
        ba, bb = ca, cb
      end
    else
      local sa, sb
      if grouped then
        s = gfind(ident)
        if s > 0 then
          sa, sb = gstate(s, a, m)
        elseif not present and kl > 0 then
          -- No group yet: start from the counter's per-key state.
          sa, sb = decode(redis.call('GET', string.sub(args, kpos, kpos + kl - 1)), a, m)
        end
      else
        sa, sb, e = decode(read(base, i, ident), a, m)
        same = a ~= 1 and sa == ws
      end
      ca, cb = advance(a, m, p, sa, sb, now, ws)
      ba, bb = ca, cb
    end
    local xa, xb
    if a == 1 then
      -- A bucket's leases hold units beside what it consumed (H).
      local h = H[ident] or 0
      if denied < 0 and m - ca - h < x then
        denied = i - 1
        if x > m then never = 1 else retry = ceil((ca + h + x - m) * p / m) end
      end
      xa, xb = ca + x, cb
    else
      if denied < 0 and cb + x > m then
        denied = i - 1
        if x > m then never = 1 else retry = we * 1000000 - now end
      end
      xa, xb = ca, cb + x
    end
    if grouped then same = s end
    st[o + 1], st[o + 2], st[o + 3], st[o + 4], st[o + 5], st[o + 6], st[o + 7], st[o + 8], st[o + 9], st[o + 10], st[o + 11], st[o + 12] =
      a, m, p, we, ba, bb, xa, xb, true, ident, same, e or false
  end
  local write = denied < 0 and charge
  local out = rep
  out[1], out[2], out[3], out[4] = 0, denied, retry, never
  if denied < 0 then out[1] = 1 end
  for i = 1, n do
    local o = (i - 1) * 12
    local ai, mi, pi, we = st[o + 1], st[o + 2], st[o + 3], st[o + 4]
    local a, b
    if write then
      a, b = st[o + 7], st[o + 8]
      if st[o + 9] and grouped then
        local q = gslot(st[o + 11], st[o + 10])
        local z, tag = 0, ai
        if ai == 1 then
          z, tag = bucket_z(mi, pi, a), 4
          local sl = floor(pi / 1000)
          if sl > slack then slack = sl end
        else
          z = window_z(we)
        end
        G[q - 3], G[q - 2], G[q - 1], G[q] = tag, a, b, z
      elseif st[o + 9] then
        local key = st[o + 10]
        if ai == 1 then
          cur[key] = put_bucket(key, mi, pi, a, b, st[o + 12] or nil)
        elseif st[o + 11] then
          local v = pack('<Bdd', ai, a, b)
          redis.call('SET', key, v, 'KEEPTTL')
          cur[key] = v
        else
          cur[key] = put_window(key, ai, a, b, we)
        end
      end
    else
      a, b = st[o + 5], st[o + 6]
    end
    local r = 4 + (i - 1) * 3
    if ai == 1 then
      local full = 0
      a = a + (H[st[o + 10]] or 0)
      if a > 0 then full = ceil(a * pi / mi) end
      out[r + 1], out[r + 2], out[r + 3] = floor(mi - a), full, 0
    else
      out[r + 1], out[r + 2], out[r + 3] = mi - b, we * 1000000 - now, a
    end
  end
  if write and grouped then gsave(gkey, slack) end
  return pack_doubles(out, 4 + 3 * n)
end

-- adjust applies n deltas, to keys of their own or (grouped) to the slots
-- of the operation's only key, found by the id each debit adds. With
-- create (a charge copied from the local fallback, see Store.copyBack) a
-- window counter that holds no state of the ticket's window starts it,
-- empty, when that window is the current one.
local function adjust(base, n, args, pos, grouped, create)
  local gkey
  if grouped or create then
    if not now then now, now_s, real_ms = now_us(clock) end
  end
  if grouped then
    gkey = KEYS[base + 1]
    gload(read(base, 1, gkey))
  end
  local changed, slack = 0, 0
  for i = 1, n do
    local a, m, p, w, d, id
    if grouped then
      a, m, p, w, d, id, pos = unpack_state('<dddddd', args, pos)
    else
      a, m, p, w, d, pos = unpack_state('<ddddd', args, pos)
    end
    if d ~= 0 then
      local key, sa, sb, e, s, q
      if grouped then
        s = gfind(id)
        q = s * 5
        sa, sb = gstate(s, a, m)
      else
        key = KEYS[base + i]
        sa, sb, e = decode(read(base, i, key), a, m)
      end
      if a == 1 then
        if not now then now, now_s, real_ms = now_us(clock) end
        local c, ts = advance(1, m, p, sa, sb, now, 0)
        c = c + d
        if c < 0 then c = 0 end
        if not grouped then
          cur[key] = put_bucket(key, m, p, c, ts, e)
        else
          q = gslot(s, id)
          G[q - 3], G[q - 2], G[q - 1], G[q] = 4, c, ts, bucket_z(m, p, c)
          local sl = floor(p / 1000)
          if sl > slack then slack = sl end
        end
        changed = changed + 1
      elseif sa == w then
        sb = sb + d
        if sb < 0 then sb = 0 end
        if grouped then
          G[q - 1] = sb
        else
          local nv = pack('<Bdd', a, sa, sb)
          redis.call('SET', key, nv, 'KEEPTTL')
          cur[key] = nv
        end
        changed = changed + 1
      elseif create and d > 0 then
        local ws, we = window_of(a, p)
        if ws == w then
          if not grouped then
            cur[key] = put_window(key, a, w, d, we)
          else
            q = gslot(s, id)
            G[q - 3], G[q - 2], G[q - 1], G[q] = a, w, d, window_z(we)
          end
          changed = changed + 1
        end
      end
    end
  end
  if grouped and changed > 0 then gsave(gkey, slack) end
  return changed
end
