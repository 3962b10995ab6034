-- tollgate's shared concurrency limit on Redis: the slots of one customer, as a sorted set
-- of holders. A member is a holder id (an instance's id and a sequence number), its score the
-- end of its lease in ms. A holder that stops renewing (its instance crashed, or lost Redis
-- for longer than a lease) stops counting once its lease ends.
--
-- KEYS[1]   the customer's set.
-- ARGV[1]   now in ms (the client's clock), or "" to read the server's TIME.
-- ARGV[2]   the operation: "A" acquire, "R" release, "N" renew, "C" count.
-- ARGV[3]   the lease in ms (1 to 2^40).
-- ARGV[4]   the least TTL of the key in ms beyond its last lease (0 on server time; with a
--           client clock, whose pace need not be the server's, a floor that keeps the key
--           until the client's time catches up).
-- A: ARGV[5] the holder, ARGV[6] the slots open to it (1 to 2^32).
-- R: ARGV[5..] the holders to release.
-- N: ARGV[5..] the holders to renew.
--
-- Every call first drops the holders whose lease has ended (score <= now). Then:
-- A  counts the holders; below the slots, adds the holder with score now + lease.
-- R  removes the holders (a holder not there is no error: its lease ended, or a release
--    sent twice).
-- N  moves each holder still there to now + lease; a holder no longer there is not added
--    back (its slot may be taken by now).
-- C  counts.
-- After a write the key expires with its last lease (plus the floor), so a customer whose
-- holders all vanished leaves nothing behind.
--
-- Replies: {0, count} taken (A), released (R, the count left) or counted (C); {1, count}
-- refused (A); {0, count, i...} renewed (N), with the 1-based positions of the holders that
-- were no longer there; {2} the clock reading out of range; {3} arguments refused.
--
-- Exactness: scores are integers below 2^53 (now <= 2^52 ms, checked; lease <= 2^40), so
-- every sum here is exact in Lua's doubles.

local key = KEYS[1]
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
  if not now or now < 0 or now ~= math.floor(now) then return {3} end
  if now > 4503599627370496 then return {2} end
end
local op = ARGV[2]
local lease = tonumber(ARGV[3])
local floor = tonumber(ARGV[4])
if not lease or lease < 1 or lease > 1099511627776 or lease ~= math.floor(lease) then
  return {3}
end
if not floor or floor < 0 or floor > 1099511627776 then return {3} end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

-- The key lives as long as its last lease, and the floor beyond it.
local function keep()
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then
    local ttl = tonumber(top[2]) - now + floor
    if ttl < 1 then ttl = 1 end
    redis.call('PEXPIRE', key, ttl)
  end
end

if op == 'A' then
  local slots = tonumber(ARGV[6])
  if not ARGV[5] or not slots or slots < 1 or slots > 4294967296 then return {3} end
  local n = redis.call('ZCARD', key)
  if n >= slots then return {1, n} end
  redis.call('ZADD', key, now + lease, ARGV[5])
  keep()
  return {0, n + 1}
elseif op == 'R' then
  for i = 5, #ARGV do
    redis.call('ZREM', key, ARGV[i])
  end
  return {0, redis.call('ZCARD', key)}
elseif op == 'N' then
  local reply = {0, 0}
  for i = 5, #ARGV do
    if redis.call('ZADD', key, 'XX', 'CH', now + lease, ARGV[i]) == 0
        and not redis.call('ZSCORE', key, ARGV[i]) then
      reply[#reply + 1] = i - 4
    end
  end
  keep()
  reply[2] = redis.call('ZCARD', key)
  return reply
elseif op == 'C' then
  return {0, redis.call('ZCARD', key)}
end
return {3}
