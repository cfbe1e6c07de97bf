-- Take a lock and hand out its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] token counter (same hash slot, never expires),
-- KEYS[3] this owner's tombstone key (set by a release of it, see release.lua),
-- KEYS[4] (with ARGV[3] only) holder record (a hash: owner, token, value)
-- ARGV[1] owner value (unique to the attempt), ARGV[2] TTL in milliseconds,
-- ARGV[3] (optional) the holder's value: when given, the record is written
-- with the lock and expires with it; without it nothing else is touched
-- The token is max(counter + 1, the server's TIME in µs): a node restarted
-- without its counter, from an older snapshot, or a promoted replica whose
-- counter lags still hands out a larger token than any before, as long as
-- server clocks differ by less than the restart or failover takes.
-- Returns {1, token as a decimal string} when taken, {0, pttl} when held (the holder's remaining ms).
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  -- A retry of this very attempt (the client resent it after losing the
  -- reply): the lock is already ours, and nobody can have been granted a
  -- token since, so the counter is this attempt's token.
  return {1, redis.call('GET', KEYS[2])}
end
if cur then
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- This attempt was given back already: a late copy of it must not take
  -- the lock for nobody.
  return {0, 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local n = redis.pcall('INCR', KEYS[2])
if type(n) == 'table' and n.err then
  -- A corrupt counter must not leave a lock without a token behind.
  redis.call('DEL', KEYS[1])
  return n
end
-- Strings, not Lua numbers (doubles, exact only to 2^53): the counter as
-- GET returns it, and µs since the epoch, compared as canonical decimals.
local token = redis.call('GET', KEYS[2])
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
if #token < #now or (#token == #now and token < now) then
  redis.call('SET', KEYS[2], now)
  token = now
end
if ARGV[3] then
  redis.call('HSET', KEYS[4], 'owner', ARGV[1], 'token', token, 'value', ARGV[3])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return {1, token}
