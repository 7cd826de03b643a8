-- A frozen copy of src/store/redis/commit.lua as it was before the top index (issue 25,
-- item 5): redis_commit_diff.py runs random batches through it and the current script and
-- requires the same counts, offsets and replies. Not built into the product; never edit it to
-- follow the product script.
--
-- The Redis store's commit script (src/store/redis/redis_commit.c runs it with EVALSHA; it is
-- compiled in by CMake, as web/live.html is). See src/store/redis/redis.c's file comment.
-- Arguments:
--   KEYS[1] offsets hash, KEYS[2] staging list
--   ARGV[1] "stage", "commit" or "commit_quiet", ARGV[2] m = number of offsets,
--   ARGV[3] parts staged by earlier calls, ARGV[4] staging TTL (ms),
--   ARGV[5..4+3m] per offset: field, expected ("" = must not exist), next,
--   ARGV[5+3m] this part's deltas, packed: a MessagePack array count key, delta, count key,
--   delta... (redis_commit.c's pack_part; cmsgpack decodes it in C), a delta an integer below
--   2^53 in magnitude, else its decimal string,
--   ARGV[6+3m] "1": incr_only (below), else "0".
-- A staged part is kept whole, as one element of the staging list; the commit unpacks each.
-- Replies: {1} a part staged, or committed by "commit_quiet" (the caller wants no totals: a
-- reply of one integer per post would cost both sides about 70 bytes a post while it lasts);
-- {1, total...} committed by "commit", each post's new total in batch order (staged parts
-- first; exact below 2^53, as Lua numbers are doubles); {0, i, stored} offset i
-- conflicts (nothing written); {-1} the staged parts
-- are not all there (nothing written); {-2, key, i, why} the count key of delta i (0-based, in
-- batch order) cannot take the delta (nothing written): why "overflow" (its magnitude would
-- pass 9e18) or "type" (not an integer, or another type).
--
-- Where the server's time goes (bench/RESULTS.md, issue 27's section, a profile): per post one
-- MGET element (the check) and one MSET element (the write), CHUNK posts per redis.call,
-- instead of a GET call and an INCRBY call each, and an EXISTS element for a post that has no
-- count yet (MGET answers nil for a key of another type too). MSET writes totals the script
-- computed: Lua numbers are doubles, so only a total whose terms and sum stay below 2^53 is
-- written that way (Redis formats it as a plain integer); any other post takes INCRBY, which is
-- exact, after every check has passed. Every check comes before the first write.
local m = tonumber(ARGV[2])
local staged = tonumber(ARGV[3])
local mine = ARGV[5 + 3 * m]
for i = 0, m - 1 do
  local have = redis.call('HGET', KEYS[1], ARGV[5 + 3 * i])
  local want = ARGV[6 + 3 * i]
  if (want == '' and have) or (want ~= '' and have ~= want) then
    redis.call('DEL', KEYS[2])
    return {0, i, have or ''}
  end
end
if redis.call('LLEN', KEYS[2]) ~= staged then
  redis.call('DEL', KEYS[2])
  return {-1}
end
if ARGV[1] == 'stage' then
  redis.call('RPUSH', KEYS[2], mine)
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return {1}
end

-- unpack() is bounded by Lua's C stack (LUAI_MAXCSTACK 8000): 1000 keys per MGET, 2000
-- arguments per MSET. Lengths are counted, never taken with # (a binary search each time).
local CHUNK = 1000
local LIMIT = 9e18 -- far enough below 2^63 that rounding cannot hide an overflow
local EXACT = 9007199254740992 -- 2^53: below it a double holds every integer
local find, tonumber, unpack, call = string.find, tonumber, unpack, redis.call
-- "1": a post listed twice (store.h forbids it, but no count may be lost if it happens) or a
-- delta of 2^53 or more: every post takes INCRBY. Else every delta is packed as an integer.
local incr_only = ARGV[6 + 3 * m] == '1'

local function part(p)
  if p < staged then
    return cmsgpack.unpack(call('LINDEX', KEYS[2], p))
  end
  return cmsgpack.unpack(mine)
end

-- The staged parts are unpacked once for the checks; up to KEEP of them are kept with their
-- new totals for the writes (bounded memory on the server), later ones unpacked again.
local KEEP = 10
local kept = {}
local ks, absent = {}, {}

-- Checks one part (its deltas start at batch index base): every count absent or an integer,
-- every new total within 9e18. Fills news (the total, or false: INCRBY it). Returns a refusal
-- or nil.
local function check(kv, n, base, news)
  for c = 1, n, CHUNK do
    local last = c + CHUNK - 1
    if last > n then last = n end
    local nk = 0
    for i = c, last do
      nk = nk + 1
      ks[nk] = kv[2 * i - 1]
    end
    local vals = call('MGET', unpack(ks, 1, nk))
    local bad, why
    local na = 0
    for i = c, last do
      local v = vals[i - c + 1]
      local old = 0
      if v then
        if v ~= '0' and not find(v, '^%-?[1-9]%d*$') then
          bad, why = i, 'type'
          break
        end
        old = tonumber(v)
      else
        na = na + 1 -- absent, or another type: MGET answers nil to both
        absent[na] = ks[i - c + 1]
      end
      local s = old + kv[2 * i] -- a delta packed as a string is converted (incr_only)
      if s > LIMIT or s < -LIMIT then
        bad, why = i, 'overflow'
        break
      end
      if old < EXACT and old > -EXACT and s < EXACT and s > -EXACT then
        news[i] = s
      else
        news[i] = false
      end
    end
    if na > 0 and call('EXISTS', unpack(absent, 1, na)) > 0 then
      for i = c, bad or last do -- another type is "type" even where the delta overflows too
        if not vals[i - c + 1] and call('EXISTS', kv[2 * i - 1]) == 1 then
          bad, why = i, 'type'
          break
        end
      end
    end
    if bad then
      return {-2, kv[2 * bad - 1], base + bad - 1, why}
    end
  end
  return nil
end

local base = 0
for p = 0, staged do
  local kv = part(p)
  local n = #kv / 2
  local news = {}
  local refused = check(kv, n, base, news)
  if refused then
    call('DEL', KEYS[2])
    return refused
  end
  if p < KEEP or p == staged then
    kept[p] = {kv, news}
  end
  base = base + n
end

local totals = {1}
local nt = 1
local keep = ARGV[1] == 'commit'
local args = ks
for p = 0, staged do
  local kv, news
  if kept[p] then
    kv, news = kept[p][1], kept[p][2]
    kept[p] = nil
  else
    kv, news = part(p), {}
    check(kv, #kv / 2, 0, news) -- passed once already; nothing has changed its counts since
  end
  local na = 0
  for i = 1, #kv / 2 do
    local s = news[i]
    if s and not incr_only then
      args[na + 1] = kv[2 * i - 1]
      args[na + 2] = s
      na = na + 2
      if na == 2 * CHUNK then
        call('MSET', unpack(args, 1, na))
        na = 0
      end
    else
      s = call('INCRBY', kv[2 * i - 1], kv[2 * i])
    end
    if keep then
      nt = nt + 1
      totals[nt] = s
    end
  end
  if na > 0 then call('MSET', unpack(args, 1, na)) end
end
for i = 0, m - 1 do call('HSET', KEYS[1], ARGV[5 + 3 * i], ARGV[7 + 3 * i]) end
call('DEL', KEYS[2])
return totals
