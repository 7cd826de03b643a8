-- The Redis store's commit script (src/store/redis/redis_commit.c runs it with EVALSHA; it is
-- compiled in by CMake, as web/live.html is). See src/store/redis/redis.c's file comment.
-- Arguments:
--   KEYS[1] offsets hash, KEYS[2] staging list, KEYS[3] the top index (a sorted set),
--   KEYS[4] the index's state (a hash: "floor", "built"); see "The top index" below
--   ARGV[1] "stage", "commit" or "commit_quiet", ARGV[2] m = number of offsets,
--   ARGV[3] parts staged by earlier calls, ARGV[4] staging TTL (ms),
--   ARGV[5..4+3m] per offset: field, expected ("" = must not exist), next,
--   ARGV[5+3m] this part's deltas, packed: a MessagePack array count key, delta, count key,
--   delta... (redis_commit.c's pack_part; cmsgpack decodes it in C), a delta an integer below
--   2^53 in magnitude, else its decimal string,
--   ARGV[6+3m] "1": incr_only (below), else "0",
--   ARGV[7+3m] K, the most posts the top index keeps.
-- Two more modes, for the index alone (KEYS as above; the offsets and staging keys untouched):
--   ARGV[1] "top", ARGV[2] n: {0} the index cannot prove its answer (not built, or the n-th
--     score not above the floor: the caller scans), else {1, key, count, key, count...}: every
--     member whose score is at least the n-th's, with its count as stored now (false: gone);
--   ARGV[1] "absorb", ARGV[2] K, ARGV[3] "1" on the last page of a SCAN (the index is built
--     once it is absorbed), ARGV[4...] count keys: offers each key's count to the index.
-- A staged part is kept whole, as one element of the staging list; the commit unpacks each.
-- Replies: {1} a part staged, or committed by "commit_quiet" (the caller wants no totals: a
-- reply of one integer per post would cost both sides about 70 bytes a post while it lasts);
-- {1, total...} committed by "commit", each post's new total in batch order (staged parts
-- first; exact below 2^53, as Lua numbers are doubles); {0, i, stored} offset i
-- conflicts (nothing written); {-3, why} the index's keys are of another type or its floor
-- is not a number (nothing written); {-1} the staged parts
-- are not all there (nothing written); {-2, key, i, why} the count key of delta i (0-based, in
-- batch order) cannot take the delta (nothing written): why "overflow" (its magnitude would
-- pass 9e18; for a post listed twice, after any of its deltas in batch order) or "type" (not an
-- integer, or another type).
--
-- Where the server's time goes (bench/RESULTS.md, "The Redis commit: where the server's CPU
-- goes", a profile): per post one
-- MGET element (the check) and one MSET element (the write), CHUNK posts per redis.call,
-- instead of a GET call and an INCRBY call each, and an EXISTS element for a post that has no
-- count yet (MGET answers nil for a key of another type too). MSET writes totals the script
-- computed: Lua numbers are doubles, so only a total whose terms and sum stay below 2^53 is
-- written that way, formatted here with %d (exact below 2^53; Redis 7.0 formats a Lua number
-- argument with %.17g, which cost more than the whole top index: callgrind, bench/RESULTS.md);
-- any other post takes INCRBY, which is exact, after every check has passed. Every check comes
-- before the first write.

-- The top index (redis.c's file comment says why and how init builds it). KEYS[3] holds at
-- most K posts (members: the count keys), each scored with its count; KEYS[4]'s "floor" F
-- (absent: -inf) bounds every post left out. Invariants, kept by every commit in the same
-- script as its counts and offsets (so a refused batch, replayed or a zombie's, touches none):
--   I1 every member's score is its count (a double: exact below 2^53), and is >= F;
--   I2 every count key that is not a member holds a count <= F (once built: see absorb).
-- Hence a member scored above F ranks above every post left out, and top reads n members and
-- their ties instead of every key. The cost is per post a comparison in Lua; a ZADD only for a
-- post whose new total beats the lowest member (or while the index is not full), a ZADD XX or
-- ZREM only for a post that fell from at least F; one ZPOPMIN per commit trims it back to K.
local call, tonumber = redis.call, tonumber
local ZKEY, MKEY = KEYS[3], KEYS[4]
local TOPK, size, low, floor, floor_was

-- Checks the index's keys (a script that fails halfway is not rolled back, so this comes
-- before any write) and loads its state. Returns a refusal or nil.
local function ix_load(k)
  local zt, mt = call('TYPE', ZKEY).ok, call('TYPE', MKEY).ok
  if (zt ~= 'zset' and zt ~= 'none') or (mt ~= 'hash' and mt ~= 'none') then
    return {-3, 'type'}
  end
  local f = call('HGET', MKEY, 'floor')
  floor = -math.huge
  if f then
    floor = tonumber(f)
    if not floor then return {-3, 'floor'} end
  end
  floor_was = floor
  TOPK = tonumber(k)
  size = call('ZCARD', ZKEY)
  low = math.huge -- at most the lowest member's score: an underestimate only costs ZADDs
  if size > 0 then low = tonumber(call('ZRANGE', ZKEY, 0, 0, 'WITHSCORES')[2]) end
  return nil
end

local CHUNK = 1000 -- unpack() is bounded by Lua's C stack (LUAI_MAXCSTACK 8000)

-- ZADDs wait in zp (score, member, ...) and go ZCHUNK at a time: a redis.call costs more than the
-- command it runs (arguments and reply converted, a fake client), and hot posts, which are the
-- members, are written in every batch. Flushed before anything that reads or removes members
-- (members of zp are members already as far as the rules go).
local zp, nzp = {}, 0
local ZCHUNK = 256
local function ix_flush()
  if nzp > 0 then
    size = size + call('ZADD', ZKEY, unpack(zp, 1, nzp))
    nzp = 0
  end
end

-- Trims the index back to K members; the largest score trimmed raises F (I2 for them).
local function ix_trim()
  ix_flush()
  if size > TOPK then
    local popped = call('ZPOPMIN', ZKEY, size - TOPK)
    local top = tonumber(popped[#popped])
    if top > floor then floor = top end
    low = top
    size = TOPK
  end
end

-- A post that is new or grew to t, t > F (the caller's test: most posts stop there, without a
-- call). If it is a member, its old score was >= low, so t > low: it is updated here. Otherwise
-- it enters when it beats the lowest member or the index may not be full (size counts only the
-- members ZADD reported, so it is never above the truth), and when it does not, F rises to t:
-- as if it entered and was trimmed at once (t <= low <= every member, so I1 holds).
local function ix_offer(key, t)
  if size < TOPK and size + nzp / 2 >= TOPK then
    ix_flush() -- may fill it: know that before admitting more (a fresh store's first batch)
  end
  if size < TOPK or t > low then
    zp[nzp + 1] = t
    zp[nzp + 2] = key
    nzp = nzp + 2
    if t < low then low = t end
    if nzp == 2 * ZCHUNK then
      -- Trimmed at once: the lowest member rises, and fewer posts enter only to leave (an empty
      -- store's first batches, whose counts all start low).
      ix_flush()
      if size > TOPK then ix_trim() end
    end
  else
    floor = t
  end
end

-- A post that fell from old to t, old >= F and old >= low (the caller's test: below either it
-- is no member: I1, and low is at most every member's score).
-- It leaves the index when it falls below F, else a member's score follows it (ZADD XX: a
-- non-member is left out, which only a post not yet absorbed can be).
local function ix_fall(key, t)
  ix_flush()
  if t < floor then
    size = size - call('ZREM', ZKEY, key)
  else
    call('ZADD', ZKEY, 'XX', t, key)
    if t < low then low = t end
  end
end

-- Any change, membership looked up (the INCRBY path, rare: exactness over speed).
local function ix_any(key, t)
  ix_flush()
  if call('ZSCORE', ZKEY, key) then
    if t < floor then
      size = size - call('ZREM', ZKEY, key)
    else
      call('ZADD', ZKEY, t, key)
      if t < low then low = t end
    end
  elseif t > floor then
    ix_offer(key, t)
  end
end

local function ix_save()
  ix_trim()
  if floor > low then
    -- members below F (a part's cut-off passed them: see "below"), no longer counted on.
    -- Defensive: the trim keeps the K largest, which the cut-off's K posts bound from below, and
    -- redis_commit_diff finds no batch that leaves one (with this call gone it still passes).
    size = size - call('ZREMRANGEBYSCORE', ZKEY, '-inf', '(' .. string.format('%.17g', floor))
  end
  if floor ~= floor_was then call('HSET', MKEY, 'floor', string.format('%.17g', floor)) end
end

local INT = '^%-?[1-9]%d*$'

if ARGV[1] == 'top' then
  local meta = call('HMGET', MKEY, 'built', 'floor')
  if meta[1] ~= '1' then return {0} end
  local f = meta[2] and tonumber(meta[2]) or -math.huge
  local n = tonumber(ARGV[2])
  local nth = call('ZREVRANGE', ZKEY, n - 1, n - 1, 'WITHSCORES')
  local members
  if nth[1] then
    if tonumber(nth[2]) <= f then return {0} end -- a post left out may tie the n-th
    members = call('ZREVRANGEBYSCORE', ZKEY, '+inf', nth[2])
  elseif f == -math.huge then
    members = call('ZRANGE', ZKEY, 0, -1) -- never trimmed: every post is a member
  else
    return {0}
  end
  local out, no = {1}, 1
  local nm = #members
  for c = 1, nm, CHUNK do
    local last = c + CHUNK - 1
    if last > nm then last = nm end
    local vals = call('MGET', unpack(members, c, last))
    for j = c, last do
      out[no + 1] = members[j]
      out[no + 2] = vals[j - c + 1]
      no = no + 2
    end
  end
  return out
end

if ARGV[1] == 'absorb' then
  local refused = ix_load(ARGV[2])
  if refused then return refused end
  local nk = #ARGV - 3
  for c = 4, 3 + nk, CHUNK do
    local last = c + CHUNK - 1
    if last > 3 + nk then last = 3 + nk end
    local vals = call('MGET', unpack(ARGV, c, last))
    for j = c, last do
      local v = vals[j - c + 1]
      if v and (v == '0' or string.find(v, INT)) and tonumber(v) > floor then
        ix_flush()
        if not call('ZSCORE', ZKEY, ARGV[j]) then ix_offer(ARGV[j], tonumber(v)) end
      end
    end
  end
  ix_save()
  if ARGV[3] == '1' then call('HSET', MKEY, 'built', '1') end
  return {1}
end

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
local LIMIT = 9e18 -- far enough below 2^63 that rounding cannot hide an overflow
local EXACT = 9007199254740992 -- 2^53: below it a double holds every integer
local find, format, unpack = string.find, string.format, unpack
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
-- incr_only: a post may be listed twice, so a delta is checked against its count plus the
-- post's deltas before it in the batch, every total its INCRBYs pass through (a post listed
-- twice whose deltas overflow only together would otherwise fail half way through the writes).
local sofar = incr_only and {} or nil

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
      local s = kv[2 * i] -- a delta packed as a string is converted (incr_only)
      if sofar then
        local key = kv[2 * i - 1]
        s = (sofar[key] or 0) + s
        sofar[key] = s
      end
      s = old + s
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

do
  local refused = ix_load(ARGV[7 + 3 * m])
  if refused then
    call('DEL', KEYS[2])
    return refused
  end
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
    if not incr_only then -- incr_only needs no totals (and earlier parts may have its posts)
      check(kv, #kv / 2, 0, news) -- passed once already; nothing has changed its counts since
    end
  end
  -- An index not full yet (an empty store's first batch) would take every post that beats its
  -- lowest member, which rises only as it is trimmed: thousands of posts entering only to
  -- leave. Instead a post of this part below the part's own K-th largest total, which K posts
  -- of the part beat, is left out at once (F rises to it; members F passes are dropped by
  -- ix_save). A sort of the part's totals, only then.
  local below = -math.huge
  if size < TOPK and not incr_only and #kv / 2 > TOPK then
    local ts, nts = {}, 0
    for i = 1, #kv / 2 do
      if news[i] then
        nts = nts + 1
        ts[nts] = news[i]
      end
    end
    if nts > TOPK then
      table.sort(ts)
      below = ts[nts - TOPK + 1]
    end
  end
  local na = 0
  for i = 1, #kv / 2 do
    local s = news[i]
    local key, d = kv[2 * i - 1], kv[2 * i]
    if s and not incr_only then
      args[na + 1] = key
      args[na + 2] = format('%d', s) -- below 2^53: exact (see "Where the server's time goes")
      na = na + 2
      if na == 2 * CHUNK then
        call('MSET', unpack(args, 1, na))
        na = 0
      end
      -- The index (above): a post that grew is offered; one that fell or stayed and is above
      -- F is a member or new (I2), which a lookup tells; one that fell from at least F and low
      -- may be a member. Most posts stop at the first comparison.
      if d > 0 then
        if s > floor then
          if s < below then floor = s else ix_offer(key, s) end
        end
      elseif s > floor then
        ix_any(key, s)
      elseif d < 0 and s - d >= floor and s - d >= low then
        ix_fall(key, s)
      end
    else
      s = call('INCRBY', key, d)
      ix_any(key, s)
    end
    if keep then
      nt = nt + 1
      totals[nt] = s
    end
  end
  if na > 0 then call('MSET', unpack(args, 1, na)) end
end
ix_save()
for i = 0, m - 1 do call('HSET', KEYS[1], ARGV[5 + 3 * i], ARGV[7 + 3 * i]) end
call('DEL', KEYS[2])
return totals
