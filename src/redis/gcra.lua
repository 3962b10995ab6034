-- tollgate's GCRA step on Redis: one call decides one check against every limit it names,
-- all or nothing. Vocabulary as in src/engine/gcra.rs, in microseconds: `tat` (theoretical
-- arrival time), `w` (the weight of the check), `tau` (the tolerance).
--
-- KEYS[i]     the cell of limit i (all in one hash slot: the caller uses one hash tag).
-- ARGV[1]     now in µs (the client's clock), or "" to read the server's TIME.
-- ARGV[2]     "1" to charge the check (write the new TATs on allow), "0" to evaluate only,
--             "L:m:l" to take a lease of at most m cells over a horizon of l µs (one key only;
--             see the end), "L:m:l:e" the same only if the caller's previous lease ended at
--             e and the TAT has not fallen below it since. "1:l" and "0:l" are "1" and "0"
--             from a limiter whose leases have the horizon l: leased cells hold a TAT up to
--             now + tau + l, which the clamp below must keep. "R:l", "C:l" and "X:l" settle
--             instead of checking (refund, charge, reset: see the end).
-- ARGV[3]     the least PX TTL in ms (0 on server time; with a client clock, whose pace need
--             not be the server's, a floor that keeps keys until the client's time catches up),
--             then optionally ":d", the debt cap d in µs (0 without): a charge may push a TAT
--             up to now + tau + d, so the clamp keeps that much too.
-- ARGV[2i+2]  w_i, ARGV[2i+3] tau_i: integers, 0 <= w_i <= tau_i <= 2^50 (for a settle,
--             w_i <= tau_i + l + d).
--
-- A cell's value is "tat:tau", the TAT and the tolerance it was written under. When the
-- tolerance changed, the cell first keeps its fill level: tat' = now + ceil(a * tau / tau_old)
-- with a = min(tat - now, tau_old). Then the clamp tat <= now + tau + l + d (l = 0 without
-- leases, d = 0 without debt: it undoes only the TAT a client clock ahead of this one wrote),
-- then the step: allowed iff
-- max(tat, now) + w - now <= tau for every cell.
--
-- Writes: on allow (when charging), each cell of non-zero weight gets its new TAT, with a PX
-- TTL of tat - now (rounded up to whole ms), so an idle cell expires when it is full again.
-- A cell whose value the rescale or the clamp changed is written back even on a denial or an
-- evaluation (once per change), so every later step starts from the same state. A steady
-- denial writes nothing.
--
-- Exactness: Lua numbers are doubles, exact for integers up to 2^53. now <= 2^52 (checked),
-- tau, l, d <= 2^50 (checked) and w <= tau (a check) or w <= tau + l + d (a settle), so every
-- TAT, sum and difference below is at most now + 2 * (tau + l + d) < 2^52 + 2^52 = 2^53. The rescale's product is up to 2^100: muldiv_ceil keeps every intermediate
-- under 2^51 (see there). Values are written with "%.0f", which prints an integral double
-- exactly (tostring would print 14 significant digits).
--
-- Reply: {code, now, ahead_1, ..., ahead_n, corrupt} where code is 0 (conforms), 1 (does not),
-- 2 (clock out of range: now > 2^52 or not an integer) and 3 (bad arguments); ahead_i =
-- max(tat_i, now) + w_i - now, from which the caller derives remaining, reset and retry-after;
-- corrupt counts the cells whose value could not be read (treated as empty and overwritten).
--
-- A lease (code 4: {4, now, k, tat0, corrupt}) reserves the next k cells of weight w in one
-- step, charged up front: with tat0 = max(tat, now) after the rescale and the clamp, cell j
-- (0-based) conforms at c_j = max(now, tat0 + (j+1)*w - tau), the instant a plain check would
-- first allow it, and k = min(m, #{j : c_j <= now + l}) = min(m, floor((now + l + tau - tat0)
-- / w)). The new TAT is tat0 + k*w <= now + l + tau < 2^53. With k = 0 (c_0 > now + l, so a
-- plain check denies too) the reply is a plain denial (code 1).
--
-- "L:m:l:e" continues a caller's run of leases: e is the TAT its previous lease left (tat0 +
-- k*w of that reply). It is granted only if now <= e <= tat: the TAT, which only rises, has
-- stayed at or ahead of the clock since that grant, so no instant in between found the bucket
-- empty and the cells of both leases sit in one unbroken stretch of TATs. Otherwise the call
-- is a plain check (code 0 or 1), charged as one. (Rust: src/redis/lease/mod.rs, why.)
--
-- Settling (ARGV[2] "R:l", "C:l", "X:l"), after the rescale and the clamp, cell by cell:
-- "R" refunds w: tat' = max(tat - w, now), never above full; "C" charges w whatever the room:
-- tat' = min(max(tat, now) + w, now + tau + d), and a TAT already past that bound stays (a
-- charge never lowers a TAT); "X" resets: the cell is deleted (full). A cell left full is
-- deleted. "R" and "C" name one more key, KEYS[n+1], in the cells' slot: a token unique to
-- the call, set NX for 10 s, so that the same call sent twice (a client's retry after a
-- dropped connection) is applied once; the second finds the token and replies {6, now}.
-- Reply {5, now, ahead_1..ahead_n, moved_1..moved_n, corrupt}: ahead_i = max(tat'_i, now) -
-- now, moved_i = the weight the step took off (R) or added (C), 0 for X.

local MAX_NOW = 4503599627370496 -- 2^52 µs: 142 years after the Unix epoch
local MAX_TAU = 1125899906842624 -- 2^50 µs: 35.7 years
local MAX_TAT = MAX_NOW + 3 * MAX_TAU -- now + tau + l + d

local function int_in(x, lo, hi)
  return x ~= nil and x == math.floor(x) and x >= lo and x <= hi
end

-- ceil(a * b / d) for integers 0 <= a <= d, 1 <= b, d <= 2^50, exactly. Binary long
-- multiplication with the remainder kept reduced: the invariant is P = q*d + r, 0 <= r < d,
-- where P is a * (the bits of b read so far). Doubling gives 2r < 2d (one subtraction brings it
-- back under d), adding a <= d gives r + a < 2d; q <= a*b/d <= b. Every value stays < 2^51.
local function muldiv_ceil(a, b, d)
  local bits, n, x = {}, 0, b
  while x > 0 do
    local bit = x % 2
    n = n + 1
    bits[n] = bit
    x = (x - bit) / 2
  end
  local q, r = 0, 0
  for i = n, 1, -1 do
    q, r = q * 2, r * 2
    if r >= d then q, r = q + 1, r - d end
    if bits[i] == 1 then
      r = r + a
      if r >= d then q, r = q + 1, r - d end
    end
  end
  if r > 0 then q = q + 1 end
  return q
end

-- The stored TAT and tolerance, or nil if the value is missing or unreadable.
local function load(key)
  local raw = redis.pcall('GET', key)
  if raw == false or raw == nil then return nil, nil, false end
  if type(raw) ~= 'string' then
    -- An error reply. Another type is a corrupt cell; any other error (the ACL refusing GET
    -- or the key) is raised: read as an empty cell, it would allow every check.
    if type(raw) == 'table' and raw.err and string.sub(raw.err, 1, 9) ~= 'WRONGTYPE' then
      error(raw)
    end
    return nil, nil, true
  end
  local t, u = string.match(raw, '^(%d+):(%d+)$')
  local tat, tau_old = tonumber(t), tonumber(u)
  if not int_in(tat, 0, MAX_TAT) or not int_in(tau_old, 1, MAX_TAU) then
    return nil, nil, true
  end
  return tat, tau_old, false
end

local min_ttl, debt = tonumber(ARGV[3]), 0
do
  local t, d = string.match(ARGV[3] or '', '^(%d+):(%d+)$')
  if t then min_ttl, debt = tonumber(t), tonumber(d) end
end

local function store(key, tat, tau, now)
  local ttl = math.max(math.ceil((tat - now) / 1000), min_ttl)
  redis.call('SET', key, string.format('%.0f:%.0f', tat, tau), 'PX', ttl)
end

if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: TIME, then writes

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
if not int_in(now, 0, MAX_NOW) then return {2, 0} end
local op, oh = string.match(ARGV[2] or '', '^([RCX]):(%d+)$')
local n = #KEYS
if op == 'R' or op == 'C' then n = n - 1 end -- the token
if n < 1 or #ARGV ~= 3 + 2 * n or not int_in(min_ttl, 0, MAX_TAU) or not int_in(debt, 0, MAX_TAU) then
  return {3, now}
end
local charge, lease_max, lease_us, lease_after = ARGV[2] == '1', nil, 0, nil
local lm, lu, le = string.match(ARGV[2], '^L:(%d+):(%d+):(%d+)$')
if not lm then lm, lu = string.match(ARGV[2], '^L:(%d+):(%d+)$') end
local cm, ch = string.match(ARGV[2], '^([01]):(%d+)$')
if op then
  charge, lease_us = false, tonumber(oh)
elseif lm then
  charge, lease_max, lease_us = true, tonumber(lm), tonumber(lu)
  if n ~= 1 or not int_in(lease_max, 1, 1048576) then return {3, now} end
  if le then
    lease_after = tonumber(le)
    if not int_in(lease_after, 0, MAX_NOW + 2 * MAX_TAU) then return {3, now} end
  end
elseif cm then
  charge, lease_us = cm == '1', tonumber(ch)
end
if not int_in(lease_us, 0, MAX_TAU) then return {3, now} end

local cells, conforms, corrupt = {}, true, 0
for i = 1, n do
  local w, tau = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local wmax = op and tau + lease_us + debt or tau
  if not int_in(tau, 1, MAX_TAU) or not int_in(w, 0, wmax) then return {3, now} end
  local stored, tau_old, bad = load(KEYS[i])
  if bad then corrupt = corrupt + 1 end
  local tat = stored or 0
  if stored and tau_old ~= tau and tat > now then
    tat = now + muldiv_ceil(math.min(tat - now, tau_old), tau, tau_old)
  end
  tat = math.min(tat, now + tau + lease_us + debt)
  local ahead = math.max(tat, now) - now + w
  if ahead > tau then conforms = false end
  -- Write back a rescale, a lowering clamp, or a corrupt value (then `stored` is nil).
  local fix = tat > now and (stored ~= tat or tau_old ~= tau)
  cells[i] = {w = w, tau = tau, tat = tat, ahead = ahead, fix = fix}
end

if op then
  if op ~= 'X' and not redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', 10000) then
    return {6, now}
  end
  local reply = {5, now}
  for i = 1, n do
    local c = cells[i]
    local base, tat, moved = math.max(c.tat, now), c.tat, 0
    if op == 'R' then
      tat = math.max(base - c.w, now)
      moved = base - tat
    elseif op == 'C' then
      local cap = now + c.tau + debt
      if base < cap then tat = math.min(base + c.w, cap) end
      moved = math.max(tat - base, 0)
    else
      tat = now
    end
    if tat > now then
      if moved > 0 or c.fix then store(KEYS[i], tat, c.tau, now) end
    else
      redis.call('DEL', KEYS[i])
    end
    reply[2 + i] = math.max(tat, now) - now
    reply[2 + n + i] = moved
  end
  reply[3 + 2 * n] = corrupt
  return reply
end

local c1 = cells[1]
if lease_max and c1.w > 0 and (not lease_after or (now <= lease_after and lease_after <= c1.tat)) then
  local c = c1
  local tat0 = math.max(c.tat, now)
  -- At most 0 only for a TAT in debt (past now + tau + l): then k < 1, a plain denial.
  local room = now + lease_us + c.tau - tat0
  -- The division rounds to nearest: step back if it rounded up past an integer.
  local k = math.min(lease_max, math.floor(room / c.w))
  if k * c.w > room then k = k - 1 end
  if k >= 1 then
    store(KEYS[1], tat0 + k * c.w, c.tau, now)
    return {4, now, k, tat0, corrupt}
  end
end

local reply = {conforms and 0 or 1, now}
for i = 1, n do
  local c = cells[i]
  if conforms and charge and c.w > 0 then
    store(KEYS[i], now + c.ahead, c.tau, now)
  elseif c.fix then
    store(KEYS[i], c.tat, c.tau, now)
  end
  reply[2 + i] = c.ahead
end
reply[n + 3] = corrupt
return reply
