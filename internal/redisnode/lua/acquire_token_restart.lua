-- Take a lock and hand out its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] token counter (same hash slot, never expires),
-- KEYS[3] this owner's tombstone key (set by a release of it, see release.lua),
-- KEYS[4] (with ARGV[5] only) holder record (a hash: owner, token, value)
-- ARGV[1] owner value (unique to the attempt), ARGV[2] TTL in milliseconds,
-- ARGV[3] how long a refused attempt is remembered, in milliseconds,
-- ARGV[4] how long the token counter outlives this grant, in milliseconds
-- (the lock's TTL and an hour: see below),
-- ARGV[5] (optional) the holder's value: when given, the record is written
-- with the lock and expires with it; without it nothing else is touched
-- The token is max(counter + 1, the server's TIME in µs): a node restarted
-- without its counter, from an older snapshot, or a promoted replica whose
-- counter lags still hands out a larger token than any before, as long as
-- server clocks differ by less than the restart or failover takes.
-- Returns the token as a decimal string when taken, the holder's remaining
-- ms (PTTL, an integer) when held: one value, no array, for the client to
-- decode.
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- This attempt was given back already: a late copy of it must not take
  -- the lock for nobody. (Its lock cannot be there: the release that left
  -- the tombstone deleted it.)
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = 0
  end
  return pttl
end
-- Set if free, and the holder's value either way (Redis 7.0+).
local cur = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if cur == ARGV[1] then
  -- A retry of this very attempt (the client resent it after losing the
  -- reply): the lock is already ours, and nobody can have been granted a
  -- token since, so the counter is this attempt's token.
  return redis.call('GET', KEYS[2])
end
if cur then
  redis.call('SET', KEYS[3], 'refused', 'PX', ARGV[3])
  return redis.call('PTTL', KEYS[1])
end
-- From here on the lock is set: every failure must take it back, so that
-- an acquire that fails leaves no lock without a token behind.
local function fail(err)
  redis.call('DEL', KEYS[1])
  return err
end
local n = redis.pcall('INCR', KEYS[2])
if type(n) == 'table' and n.err then
  return fail(n)
end
local token = redis.call('GET', KEYS[2])
-- MUTATION token-restart (cmd/internal/faults TestMutations; never loaded in a
-- normal build): the token is counter + 1 only, so a restart that lost the
-- counter hands out tokens from 1 again.
redis.call('PEXPIRE', KEYS[2], ARGV[4])
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[4], 'owner', ARGV[1], 'token', token, 'value', ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return token
