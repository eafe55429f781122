-- hookrouter token bucket: one atomic decision, the rules of ratelimit/bucket.py.
--
-- KEYS[1]  bucket hash  "{tenant}:rl:b:<scope>"   fields: tokens, ts
-- KEYS[2]  limits hash  "{tenant}:rl:limits"      fields: "<scope>:capacity", "<scope>:rate"
--          (an operator override; both keys carry the tenant hash tag, so a
--          Redis Cluster finds them in one slot)
-- ARGV[1]  capacity      ARGV[2] refill per second
-- ARGV[3]  want (the most to take: a lease, or the cost)
-- ARGV[4]  need (the least that is useful: the cost)
-- ARGV[5]  scope (names the override fields)
-- Returns { granted, tokens left, retry_after } as strings: Redis would truncate
-- Lua numbers in a reply to integers.
-- This file is the body of both EVALSHA scripts and the Redis Functions
-- library (token_bucket_function.lua wraps it at load time).

local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local need = tonumber(ARGV[4])

local override = redis.call('HMGET', KEYS[2], ARGV[5] .. ':capacity', ARGV[5] .. ':rate')
local o_capacity = tonumber(override[1])
local o_rate = tonumber(override[2])
if o_capacity and o_rate and o_capacity > 0 and o_rate > 0 then
  capacity = o_capacity
  rate = o_rate
end

-- Redis's clock, never the router's: routers' clocks disagree.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
else
  local elapsed = now - ts
  if elapsed < 0 then
    elapsed = 0
  end
  tokens = math.min(capacity, tokens + elapsed * rate)
end

local granted = 0
if tokens >= need then
  granted = math.min(want, tokens)
  tokens = tokens - granted
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
    'ts', string.format('%.17g', now))
  -- Forget the key once it would have refilled anyway: absent means full.
  redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil((capacity - tokens) / rate * 1000)))
end
-- (A denial writes nothing: the stored state already implies today's tokens.)
-- Seconds until `need` tokens exist again: for a denial, when to retry; after
-- a grant, when the same request could next succeed.
local retry_after = 0
if tokens < need then
  retry_after = (need - tokens) / rate
end

return { string.format('%.17g', granted), string.format('%.17g', tokens),
  string.format('%.17g', retry_after) }
