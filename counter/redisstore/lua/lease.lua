-- lease.lua: budget leases (appended to common.lua and batch.lua, whose
-- group helpers it uses; run.lua calls lease_reserve and lease_release;
-- Go: lease.go; docs/redis.md, "Leases", has the design and its bounds).
--
-- A lease is a slice of one counter's remaining capacity that one gateway
-- replica takes in the same operation as a reservation, and then serves
-- reservations and settlements from in memory, without a round trip, until
-- it has used it up or its time is over; then it releases it, reporting
-- what it used. Leases exist only over a group (counter.Debit.Group).
--
-- Counted at once: a window's lease (tag 6) adds its units to the window's
-- usage when it is granted, as a reservation would; a bucket's lease (tag
-- 7) holds its units beside what the bucket consumed: every reservation
-- and peek of the bucket counts them as taken (H in batch.lua), but they
-- do not drain with the refill, since nothing consumed them yet. (Charged
-- up front, they would drain while the lease is held, and the units used
-- from it later would get the refill of the time before they were used:
-- more than the limit.) So a lease never lets anyone admit more than the
-- limit. An earlier version of the script keeps lease slots as slots it
-- does not know: it counts a window's lease as usage, and does not see a
-- bucket's (during a rolling upgrade, a bucket can admit on old replicas
-- what the new replicas' leases hold, on top of its limit).
--
-- Lease slot: one 33-byte slot of the group value ('<dBddd', as a
-- counter's; see batch.lua):
--   id   the lease's id: 52 random bits chosen by the replica, never reused
--        and never a counter's id (a collision has odds of about 2^-52)
--   tag  6 (a window's lease) or 7 (a bucket's)
--   a    outstanding: the lease's units not yet reported (its grant, until
--        it is released)
--   b    the id of its counter (see counterID)
--   z    its expiry, in ms of the counter clock (now), at most the end of
--        the counter's window: a lease never outlives its window
-- The holder stops serving from a lease ttl after it asked for it; Redis
-- keeps it grace longer, so that a live holder's release arrives first.
--
-- Expiry: every operation over a group ends the leases whose z has passed
-- before it reads a counter (gsweep in batch.lua): a window's lease gives
-- its outstanding units back (while the counter still holds that window),
-- a bucket's lease stops holding; the slot is dropped. That is how the
-- capacity of a replica that died returns within ttl + grace. What such a
-- replica served from the lease is not counted (it never reported it): at
-- most one lease per counter and replica that dies.
--
-- Release (of lease lid with usage u: the signed sum of what its holder
-- charged to it, reservations and settlement deltas, at most its grant):
-- a window's lease whose slot still exists gives the counter u - a (at most
-- 0: the unused part comes back); a bucket's lease stops holding and the
-- bucket consumes u, now; the slot is dropped. When the slot is gone (it
-- expired, or the holder's earlier release ran and timed out), the counter
-- gets u. Both are adjustments as in batch.lua: a bucket is refilled and
-- then changed, at least 0; a window changes only while it holds the
-- lease's window w (a lease of an ended window is released into nothing),
-- except that usage of the current window whose state Redis lost with the
-- lease (a restart) starts it, as a charge copied back after an outage
-- does.
--
-- Operations (the header is batch.lua's; KEYS: the group's key):
--
-- kind 9, lease reserve: '<dddd' ttl_ms, grace_ms, share, zone, then per
-- debit a group reserve's debit (alg, max, period_us, amount, id, the
-- per-key layout's key; see packReserve) followed by '<dddddd' rid, rw, ru
-- (a lease of this counter to release first, its window and usage; rid 0:
-- none), lid, want, min (the id of a new lease for this counter, 0 for
-- none, how many units the holder would like, and the fewest worth
-- having). Steps: (1) the releases, (2) the reservation, exactly as a group
-- reserve (all or nothing; the debits' counters are distinct), (3) when it
-- is allowed, the grants, all or none: counter i gets
--   g = floor(min(want, (free - floor(max * zone)) / share))
-- where free is what it has left after this reservation (a bucket: beside
-- what its leases hold); none is granted when one of them would get less
-- than its min (or less than 1), or a window would end less than ttl from
-- now. So leases come only from the capacity above the last zone (a
-- fraction) of each limit, each takes at most 1/share of it, and near the
-- limit every reservation is exact again.
-- Reply: the group reserve's reply (remaining and reset without the
-- grant: what this reservation left), followed per debit by three
-- doubles: the units granted (0: none) and, for a bucket, what it consumed
-- after this reservation and what the other leases hold (0 for windows).
--
-- kind 10, lease release: per debit '<ddddddd' alg, max, period_us, id,
-- lid, w, u: release lease lid of that counter (as above). Reply: the
-- number of counters changed.
--
-- Atomicity, units and clock: as in batch.lua. Amounts are the caller's
-- units; ttl and grace are ms; ids are exact integers below 2^52.

-- lt holds the debits of the lease reserve being run, 17 entries each (see
-- lease_reserve); reused by every lease reserve of the batch.
local lt = {}

-- lrelease releases lease lid of a counter of algorithm alg (max m, period
-- p, current window ws) whose state is sa, sb (nil: none), charged u in
-- window w. It returns the new state, whether the counter changed, and
-- whether a lease slot was dropped (either needs a write).
local function lrelease(lid, u, w, alg, m, p, ws, sa, sb)
  local d, dropped = u, false
  local ls = gfind(lid) * 5
  if ls > 0 and G[ls - 3] >= 6 then
    if G[ls - 3] == 6 then
      d = u - G[ls - 2]
    else
      local id = G[ls - 1]
      H[id] = (H[id] or 0) - G[ls - 2]
    end
    G[ls] = 0
    dropped = true
  end
  if d == 0 then return sa, sb, false, dropped end
  if alg == 1 then
    local c, ts = advance(1, m, p, sa, sb, now, 0)
    c = c + d
    if c < 0 then c = 0 end
    return c, ts, true, dropped
  elseif sa == w then
    local used = sb + d
    if used < 0 then used = 0 end
    return sa, used, true, dropped
  elseif not dropped and d > 0 and w == ws then
    -- The lease and its window's state are gone while the window is still
    -- current: Redis lost them (a restart). The usage starts the window, as
    -- a charge copied back after an outage does.
    return w, d, true, dropped
  end
  return sa, sb, false, dropped
end

-- lease_reserve runs a lease reserve (kind 9) over n debits. Per debit lt
-- holds at 17(i-1): alg, max, period, window start, window end (s), slot,
-- counter id, the advanced state a and b, amount, whether a release
-- changed the counter, free after this reservation, lid, want, min, the
-- units granted, and (buckets) what the leases hold.
local function lease_reserve(base, n, args, pos)
  if not now then now, now_s, real_ms = now_us(clock) end
  local now_ms = floor(now / 1000)
  local gkey = KEYS[base + 1]
  local present = gload(read(base, 1, gkey))
  local ttl, grace, share, zone
  ttl, grace, share, zone, pos = unpack_state('<dddd', args, pos)
  local denied, retry, never, slack = -1, 0, 0, 0
  local save = false
  for i = 1, n do
    local a, m, p, x, id, kl
    a, m, p, x, id, kl, pos = unpack_state('<dddddH', args, pos)
    local kpos = pos
    pos = pos + kl
    local rid, rw, ru, lid, want, mn
    rid, rw, ru, lid, want, mn, pos = unpack_state('<dddddd', args, pos)
    local ws, we = window_of(a, p)
    local s = gfind(id)
    local sa, sb
    if s > 0 then
      sa, sb = gstate(s, a, m)
    elseif not present and kl > 0 then
      -- No group yet: start from the counter's per-key state.
      sa, sb = decode(redis.call('GET', string.sub(args, kpos, kpos + kl - 1)), a, m)
    end
    local changed = false
    if rid ~= 0 then
      local dropped
      sa, sb, changed, dropped = lrelease(rid, ru, rw, a, m, p, ws, sa, sb)
      save = save or dropped
    end
    local ca, cb = advance(a, m, p, sa, sb, now, ws)
    local free, h = 0, 0
    if a == 1 then
      h = H[id] or 0
      if denied < 0 and m - ca - h < x then
        denied = i - 1
        if x > m then never = 1 else retry = ceil((ca + h + x - m) * p / m) end
      end
      free = m - ca - h - x
    else
      if denied < 0 and cb + x > m then
        denied = i - 1
        if x > m then never = 1 else retry = we * 1000000 - now end
      end
      free = m - cb - x
    end
    local o = (i - 1) * 17
    lt[o + 1], lt[o + 2], lt[o + 3], lt[o + 4], lt[o + 5], lt[o + 6], lt[o + 7], lt[o + 8] =
      a, m, p, ws, we, s, id, ca
    lt[o + 9], lt[o + 10], lt[o + 11], lt[o + 12], lt[o + 13], lt[o + 14], lt[o + 15], lt[o + 16], lt[o + 17] =
      cb, x, changed, free, lid, want, mn, 0, h
  end
  -- The grants: all or none, and only for an allowed reservation.
  local grant = false
  if denied < 0 then
    for i = 1, n do
      local o = (i - 1) * 17
      if lt[o + 13] ~= 0 then
        local m = lt[o + 2]
        local g = floor(math.min(lt[o + 14], (lt[o + 12] - floor(m * zone)) / share))
        if g < lt[o + 15] or g < 1 or (lt[o + 1] ~= 1 and lt[o + 5] * 1000 - now_ms < ttl) then
          grant = false
          break
        end
        lt[o + 16] = g
        grant = true
      end
    end
  end
  local out = rep
  out[1], out[2], out[3], out[4] = 0, denied, retry, never
  if denied < 0 then out[1] = 1 end
  for i = 1, n do
    local o = (i - 1) * 17
    local a, m, p, we, s, id = lt[o + 1], lt[o + 2], lt[o + 3], lt[o + 5], lt[o + 6], lt[o + 7]
    local xa, xb, x, h = lt[o + 8], lt[o + 9], lt[o + 10], lt[o + 17]
    local g = 0
    if grant then g = lt[o + 16] end
    if denied < 0 then
      if a == 1 then xa = xa + x else xb = xb + x end
    end
    local r = 4 + (i - 1) * 3
    local e = 4 + 3 * n + (i - 1) * 3
    if a == 1 then
      local full = 0
      if xa + h > 0 then full = ceil((xa + h) * p / m) end
      out[r + 1], out[r + 2], out[r + 3] = floor(m - xa - h), full, 0
      out[e + 1], out[e + 2], out[e + 3] = g, xa, h
    else
      out[r + 1], out[r + 2], out[r + 3] = m - xb, we * 1000000 - now, xa
      out[e + 1], out[e + 2], out[e + 3] = g, 0, 0
    end
    if denied < 0 or lt[o + 11] then
      local q = gslot(s, id)
      local tag, z = 6, now_ms + ttl + grace
      if a == 1 then
        G[q - 3], G[q - 2], G[q - 1], G[q] = 4, xa, xb, bucket_z(m, p, xa)
        local sl = floor(p / 1000)
        if sl > slack then slack = sl end
        tag = 7
        if g > 0 then
          if H == NOH then H = {} end
          H[id] = h + g
        end
      else
        xb = xb + g
        G[q - 3], G[q - 2], G[q - 1], G[q] = a, xa, xb, window_z(we)
        if z > we * 1000 then z = we * 1000 end
      end
      if g > 0 then
        local lq = gslot(0, lt[o + 13])
        G[lq - 3], G[lq - 2], G[lq - 1], G[lq] = tag, g, id, z
      end
      save = true
    end
  end
  if save then gsave(gkey, slack) end
  return pack_doubles(out, 4 + 6 * n)
end

-- lease_release runs a lease release (kind 10) over n debits.
local function lease_release(base, n, args, pos)
  if not now then now, now_s, real_ms = now_us(clock) end
  local gkey = KEYS[base + 1]
  gload(read(base, 1, gkey))
  local save, slack, changed = false, 0, 0
  for _ = 1, n do
    local a, m, p, id, lid, w, u
    a, m, p, id, lid, w, u, pos = unpack_state('<ddddddd', args, pos)
    local s = gfind(id)
    local sa, sb = gstate(s, a, m)
    local ws, we = window_of(a, p)
    local chg, dropped
    sa, sb, chg, dropped = lrelease(lid, u, w, a, m, p, ws, sa, sb)
    save = save or dropped
    if chg then
      local q = gslot(s, id)
      if a == 1 then
        G[q - 3], G[q - 2], G[q - 1], G[q] = 4, sa, sb, bucket_z(m, p, sa)
        local sl = floor(p / 1000)
        if sl > slack then slack = sl end
      elseif sa == ws then
        G[q - 3], G[q - 2], G[q - 1], G[q] = a, sa, sb, window_z(we)
      else
        -- An ended window that still has its slot: only its usage changes.
        G[q - 1] = sb
      end
      changed = changed + 1
      save = true
    end
  end
  if save then gsave(gkey, slack) end
  return changed
end
