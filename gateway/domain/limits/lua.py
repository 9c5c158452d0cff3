"""The two Lua scripts the Redis limiter runs: one call admits, one call settles.

Per scope the keys are, in this order (``<p>`` = the limiter's prefix and the scope's key):

    <p>:rpm    sorted set, member = reservation id, score = admission time (us)
    <p>:tpm    sorted set, member = "<id>:<tokens>", score = admission time (us)
    <p>:tpmsum the sum of the tokens in <p>:tpm, so an admission need not add them all up
    <p>:conc   sorted set, member = reservation id, score = end of its lease (us)
    <p>:quota  hash: d (UTC day number), du (tokens used that day), m (month number), mu

Redis's own clock (TIME) is the only clock, so replicas with skewed clocks share exact
windows. A script runs atomically, so checking every limit of every scope and recording
the admission in all of them (or none) cannot interleave with another replica's request.
Members are built from the ARGV strings: Lua's own number-to-string loses digits past 14.

Every count is written as an integer string through ``count()``: Lua numbers are doubles,
and Redis writes a double that is not a small integer as a float ("1e+22"), which INCRBY
and HINCRBY then refuse on every later call, for as long as the key lives. Token arguments
that are not whole numbers below 2**53 are refused before anything is touched.
"""

from __future__ import annotations

KEYS_PER_SCOPE_ADMIT = 5
KEYS_PER_SCOPE_SETTLE = 4  # rpm is not touched by settlement
QUOTA_TTL_MS = 32 * 86_400_000  # past the end of any month; the counters roll over anyway
NO_LIMIT = -1

# Refusal codes in the admit reply are 1 + the index in types.REASONS.

# Shared by both scripts. count() floors and clamps to 0..2**53-1, where a double is still
# an exact integer, and formats with %d so that Redis is handed digits, never "1e+22".
# stored() reads a counter back; one written as a float by an older version (or damaged
# by hand) reads as the number it says, so the next write repairs it instead of failing.
_COUNTS = """
local MAX_COUNT = 9007199254740991
local function count(x)
  x = tonumber(x) or 0
  if x ~= x or x < 0 then x = 0 end
  if x > MAX_COUNT then x = MAX_COUNT end
  return string.format('%d', math.floor(x))
end
local function stored(v)
  return tonumber(count(v))
end
local function whole(arg, name)
  if not string.match(arg, '^%d+$') or tonumber(arg) > MAX_COUNT then
    error({err = 'ERR ' .. name .. ' must be a whole number below 2^53, got ' .. arg})
  end
  return tonumber(arg)
end
"""

_MONTH_OF = """
-- Days since 1970-01-01 to year * 12 + month - 1 (H. Hinnant's civil_from_days).
local function month_of(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y * 12 + m - 1
end
"""

# ARGV: id, tokens, lease_us, window_us, quota_ttl_ms, then per scope five limits (-1: none):
# requests/min, tokens/min, concurrent, tokens/day, tokens/month.
# Reply: admitted (1/0), now_us, day, month, then per scope four numbers (requests in the
# window, us until its oldest leaves, tokens in the window, us until its oldest leaves),
# then per refusal four (reason code 1-5, scope index, retry in us or -1, never fits 0/1).
ADMIT = (
    _MONTH_OF
    + _COUNTS
    + """
local id, tokens = ARGV[1], whole(ARGV[2], 'tokens')
local lease, window, quota_ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local window_ms = math.ceil(window / 1000)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local day = math.floor(tonumber(t[1]) / 86400)
local month = month_of(day)
local start = now - window
local scopes = #KEYS / 5
local state, refusals = {}, {}

local function tokens_of(member)
  return tonumber(string.match(member, ':(%d+)$'))
end

local function until_oldest(key, count)
  if count == 0 then return 0 end
  return tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) + window - now
end

for i = 0, scopes - 1 do
  local k, a = 5 * i, 5 + 5 * i
  local rpm, tpm, conc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local daily, monthly = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local s = {}

  redis.call('ZREMRANGEBYSCORE', KEYS[k + 1], '-inf', start)
  s.requests = redis.call('ZCARD', KEYS[k + 1])
  if rpm >= 0 and s.requests >= rpm then
    local frees = now
    if rpm > 0 then
      local idx = s.requests - rpm
      frees = tonumber(redis.call('ZRANGE', KEYS[k + 1], idx, idx, 'WITHSCORES')[2])
    end
    table.insert(refusals, {1, i, frees + window - now, 0})
  end

  local expired = redis.call('ZRANGEBYSCORE', KEYS[k + 2], '-inf', start)
  s.tokens = stored(redis.call('GET', KEYS[k + 3]))
  if #expired > 0 then
    for _, member in ipairs(expired) do s.tokens = s.tokens - tokens_of(member) end
    redis.call('ZREMRANGEBYSCORE', KEYS[k + 2], '-inf', start)
  end
  local in_window = redis.call('ZCARD', KEYS[k + 2])
  if in_window == 0 or s.tokens < 0 then s.tokens = 0 end
  if #expired > 0 then redis.call('SET', KEYS[k + 3], count(s.tokens), 'PX', window_ms) end
  if tpm >= 0 then
    if tokens > tpm then
      table.insert(refusals, {2, i, window, 1})
    elseif s.tokens + tokens > tpm then
      local entries = redis.call('ZRANGE', KEYS[k + 2], 0, -1, 'WITHSCORES')
      local left, retry = s.tokens, window  -- a full minute if the sum outruns its entries
      for j = 1, #entries, 2 do
        left = left - tokens_of(entries[j])
        if left + tokens <= tpm then
          retry = tonumber(entries[j + 1]) + window - now
          break
        end
      end
      table.insert(refusals, {2, i, retry, 0})
    end
  end

  redis.call('ZREMRANGEBYSCORE', KEYS[k + 4], '-inf', now)
  if conc >= 0 and redis.call('ZCARD', KEYS[k + 4]) >= conc then
    table.insert(refusals, {3, i, 1000000, 0})
  end

  local q = redis.call('HMGET', KEYS[k + 5], 'd', 'du', 'm', 'mu')
  s.day_used = (tonumber(q[1]) == day) and stored(q[2]) or 0
  s.month_used = (tonumber(q[3]) == month) and stored(q[4]) or 0
  if daily >= 0 and s.day_used + tokens > daily then
    table.insert(refusals, {4, i, -1, tokens > daily and 1 or 0})
  end
  if monthly >= 0 and s.month_used + tokens > monthly then
    table.insert(refusals, {5, i, -1, tokens > monthly and 1 or 0})
  end
  s.rpm, s.tpm, s.conc, s.tokens_in_window = rpm, tpm, conc, in_window
  state[i] = s
end

local admitted = #refusals == 0
if admitted then
  for i = 0, scopes - 1 do
    local k, s = 5 * i, state[i]
    if s.rpm >= 0 then
      redis.call('ZADD', KEYS[k + 1], now, id)
      redis.call('PEXPIRE', KEYS[k + 1], window_ms)
      s.requests = s.requests + 1
    end
    if s.tpm >= 0 then
      redis.call('ZADD', KEYS[k + 2], now, id .. ':' .. ARGV[2])
      redis.call('PEXPIRE', KEYS[k + 2], window_ms)
      s.tokens = stored(s.tokens + tokens)
      s.tokens_in_window = s.tokens_in_window + 1
      redis.call('SET', KEYS[k + 3], count(s.tokens), 'PX', window_ms)
    end
    if s.conc >= 0 then
      redis.call('ZADD', KEYS[k + 4], now + lease, id)
      redis.call('PEXPIRE', KEYS[k + 4], math.ceil(lease / 1000))
    end
    redis.call('HSET', KEYS[k + 5], 'd', day, 'du', count(s.day_used + tokens),
      'm', month, 'mu', count(s.month_used + tokens))
    redis.call('PEXPIRE', KEYS[k + 5], quota_ttl)
  end
end

local reply = {admitted and 1 or 0, now, day, month}
for i = 0, scopes - 1 do
  local k, s = 5 * i, state[i]
  table.insert(reply, s.requests)
  table.insert(reply, until_oldest(KEYS[k + 1], s.requests))
  table.insert(reply, s.tokens)
  table.insert(reply, until_oldest(KEYS[k + 2], s.tokens_in_window))
end
for _, r in ipairs(refusals) do
  for _, v in ipairs(r) do table.insert(reply, v) end
end
return reply
"""
)

# KEYS: the "settled" marker, then per scope tpm, tpmsum, conc, quota.
# ARGV: id, reserved tokens, used tokens, admission day, admission month, marker ttl (ms).
# Reply: 1 when settled now, 0 when it had been settled before (settlement is idempotent).
# Every slot is freed first: Redis does not undo a script that fails half-way, so whatever
# might fail later cannot keep a slot taken. Counters are read, adjusted and written whole
# (not INCRBY), so one left as a float by an older version is repaired, not fatal.
SETTLE = (
    _COUNTS
    + """
local id = ARGV[1]
local reserved, used = whole(ARGV[2], 'reserved tokens'), whole(ARGV[3], 'used tokens')
local day, month = tonumber(ARGV[4]), tonumber(ARGV[5])
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[6]) then return 0 end
for k = 1, #KEYS - 1, 4 do redis.call('ZREM', KEYS[k + 3], id) end
local delta = used - reserved
for k = 1, #KEYS - 1, 4 do
  local member = id .. ':' .. ARGV[2]
  local score = redis.call('ZSCORE', KEYS[k + 1], member)
  if score then
    redis.call('ZREM', KEYS[k + 1], member)
    redis.call('ZADD', KEYS[k + 1], score, id .. ':' .. ARGV[3])
    local sum = redis.call('GET', KEYS[k + 2])
    if sum then redis.call('SET', KEYS[k + 2], count(stored(sum) + delta), 'KEEPTTL') end
  end
  local q = redis.call('HMGET', KEYS[k + 4], 'd', 'du', 'm', 'mu')
  if tonumber(q[1]) == day then
    redis.call('HSET', KEYS[k + 4], 'du', count(stored(q[2]) + delta))
  end
  if tonumber(q[3]) == month then
    redis.call('HSET', KEYS[k + 4], 'mu', count(stored(q[4]) + delta))
  end
end
return 1
"""
)
