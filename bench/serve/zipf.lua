-- wrk script: GET /v1/likes/<id> with ids "1".."N" drawn from a Zipf(s) distribution, the way
-- `hotcount produce` picks posts (post 1 the hottest). N and s come from the environment:
--   ZIPF_POSTS (default 100000), ZIPF_S (default 1.1)
local n = tonumber(os.getenv("ZIPF_POSTS") or "100000")
local s = tonumber(os.getenv("ZIPF_S") or "1.1")
local cdf = nil

local function build()
  cdf = {}
  local sum = 0
  for k = 1, n do
    sum = sum + 1 / (k ^ s)
    cdf[k] = sum
  end
  for k = 1, n do
    cdf[k] = cdf[k] / sum
  end
end

local function draw()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
  build()
end

function request()
  return wrk.format("GET", "/v1/likes/" .. draw())
end
