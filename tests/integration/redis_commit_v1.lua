-- The Redis store's commit script before issue 27 (commit 5d8d40a), kept for
-- tests/integration/redis_commit_diff.py only: the product runs src/store/redis/commit.lua.
-- Arguments:
--   KEYS[1] offsets hash, KEYS[2] staging list, KEYS[3..] count keys (commit only)
--   ARGV[1] "stage", "commit" or "commit_quiet", ARGV[2] m = number of offsets,
--   ARGV[3] pairs staged by earlier parts, ARGV[4] staging TTL (ms),
--   ARGV[5..4+3m] per offset: field, expected ("" = must not exist), next,
--   then stage: count key, delta, count key, delta...; commit: one delta per KEYS[3..].
-- Staged pairs hold whole count keys, so the commit need not build them (twice) itself.
-- Replies: {1} a part staged, or committed by "commit_quiet" (the caller wants no totals: a
-- reply of one integer per post would cost both sides about 70 bytes a post while it lasts);
-- {1, total...} committed by "commit", each post's new total in batch order (staged parts
-- first; exact below 2^53, as Lua numbers are doubles); {0, i, stored} offset i
-- conflicts (nothing written); {-1} the staged pairs
-- are not all there (nothing written); {-2, key, i, why} the count key of delta i (0-based, in
-- batch order) cannot take INCRBY (nothing written): why "overflow" (its magnitude would pass
-- 9e18) or "type" (not an integer, or another type).
-- RPUSH takes 200 arguments at a time: unpack() is bounded by Lua's C stack; 200 is even, so
-- pairs stay whole. LRANGE reads 1000 elements (500 pairs) at a time for the same reason.
local m = tonumber(ARGV[2])
local staged = tonumber(ARGV[3])
local first = 5 + 3 * m
for i = 0, m - 1 do
  local have = redis.call('HGET', KEYS[1], ARGV[5 + 3 * i])
  local want = ARGV[6 + 3 * i]
  if (want == '' and have) or (want ~= '' and have ~= want) then
    redis.call('DEL', KEYS[2])
    return {0, i, have or ''}
  end
end
if redis.call('LLEN', KEYS[2]) ~= 2 * staged then
  redis.call('DEL', KEYS[2])
  return {-1}
end
if ARGV[1] == 'stage' then
  for j = first, #ARGV, 200 do
    redis.call('RPUSH', KEYS[2], unpack(ARGV, j, math.min(j + 199, #ARGV)))
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return {1}
end
local n = #KEYS - 2
-- INCRBY fails on a wrong type, a non-integer or an overflow: refuse those up front. Lua
-- numbers are doubles, so the bound is 9e18, far enough below 2^63 that rounding cannot
-- hide an overflow, and an absent count is 0 (a first delta is bounded too).
local function bad(key, d)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return 'type' end
  v = v or '0'
  if v ~= '0' and not string.find(v, '^%-?[1-9]%d*$') then return 'type' end
  local s = tonumber(v) + tonumber(d)
  if s > 9e18 or s < -9e18 then return 'overflow' end
  return nil
end
local function each_staged(fn)
  for s = 0, 2 * staged - 1, 1000 do
    local items = redis.call('LRANGE', KEYS[2], s, s + 999)
    for j = 1, #items, 2 do
      local r = fn(items[j], items[j + 1], s / 2 + (j - 1) / 2)
      if r then return r end
    end
  end
end
local refused = each_staged(function(key, d, pos)
  local why = bad(key, d)
  if why then return {-2, key, pos, why} end
end)
for i = 1, n do
  if refused then break end
  local why = bad(KEYS[i + 2], ARGV[first + i - 1])
  if why then refused = {-2, KEYS[i + 2], staged + i - 1, why} end
end
if refused then
  redis.call('DEL', KEYS[2])
  return refused
end
local totals = {1}
local keep = ARGV[1] == 'commit'
local function incr(key, d)
  local t = redis.call('INCRBY', key, d)
  if keep then totals[#totals + 1] = t end
end
each_staged(incr)
for i = 1, n do incr(KEYS[i + 2], ARGV[first + i - 1]) end
for i = 0, m - 1 do redis.call('HSET', KEYS[1], ARGV[5 + 3 * i], ARGV[7 + 3 * i]) end
redis.call('DEL', KEYS[2])
return totals
