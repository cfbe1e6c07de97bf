-- Redlock refresh that repairs: extend our lock, or take it back where it is
-- missing (the node restarted without it, or it expired there), so a held
-- lease keeps a majority while a minority of nodes fails and returns.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] the owner's tombstone key,
-- KEYS[4] retake marker, KEYS[5] holder record, KEYS[6] the lease's refresh
-- sequence (see refresh.lua)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds, ARGV[3] the lease's
-- token (decimal), ARGV[4] a nonce unique to this refresh, ARGV[5] the
-- holder's value ('' for none), ARGV[6] this refresh's sequence number,
-- ARGV[7] how long the sequence outlives the lock (see refresh.lua),
-- ARGV[8] how long a raised counter lasts (see acquire.lua)
-- A copy of an older refresh that lands after a newer one ran here (go-redis
-- resent it, or it was held up) changes nothing: it neither shortens nor
-- lengthens the lock, nor takes it back.
-- The holder record (owner, token, value) lives and ends with the lock: it
-- is extended with it, written where it is missing or an earlier holder's
-- (a node that answered phase 1 late, or whose phase 2 was lost), and
-- written with a lock taken back.
-- Returns 1 when it was ours and is extended, 2 when it was missing and is
-- ours again (the counter then at least the token, so a later holder
-- through this node gets a larger one), 0 when someone else holds it or
-- this owner has released it (or a newer refresh ran, the lock gone since).
local last = redis.call('GET', KEYS[6])
local superseded = false
if last then
  local n, owner = string.match(last, '^(%d+):(.*)$')
  superseded = owner == ARGV[1] and tonumber(n) > tonumber(ARGV[6])
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  -- A resent retake (the client lost the first reply) must still say
  -- "taken back", not "extended": the lock was missing before it.
  if redis.call('GET', KEYS[4]) == ARGV[4] then
    return 2
  end
  if superseded then
    return 1
  end
  redis.call('SET', KEYS[6], ARGV[6] .. ':' .. ARGV[1], 'PX', ARGV[7])
  local n = redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('HGET', KEYS[5], 'owner') ~= ARGV[1] then
    redis.call('HSET', KEYS[5], 'owner', ARGV[1], 'token', ARGV[3], 'value', ARGV[5])
  end
  redis.call('PEXPIRE', KEYS[5], ARGV[2])
  return n
end
-- Released (a tombstone '0' or '1'; 'refused' only marks an attempt of
-- this owner that a node refused, which the lease may still repair).
local gone = redis.call('GET', KEYS[3])
if cur or superseded or gone == '0' or gone == '1' then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[6], ARGV[6] .. ':' .. ARGV[1], 'PX', ARGV[7])
redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
redis.call('HSET', KEYS[5], 'owner', ARGV[1], 'token', ARGV[3], 'value', ARGV[5])
redis.call('PEXPIRE', KEYS[5], ARGV[2])
-- Compare canonical decimal strings: Lua numbers would round past 2^53.
local n = redis.call('GET', KEYS[2]) or '0'
local want = ARGV[3]
if #n < #want or (#n == #want and n < want) then
  redis.call('SET', KEYS[2], want, 'PX', ARGV[8])
end
return 2
