-- Redlock phase 2: raise the token counter to at least ARGV[2], and record
-- the holder, only while the lock still holds our owner value.
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] holder record
-- ARGV[1] owner, ARGV[2] token (decimal), ARGV[3] TTL in milliseconds (the
-- lock's, for a lock without an expiry), ARGV[4] the holder's value ('' for
-- none), ARGV[5] how long a raised counter lasts (see acquire.lua)
-- The record expires with the lock: a copy of this call that lands late,
-- after a refresh lengthened the lock, must not cut the record short.
-- The record carries the lease's token: this node's counter may differ
-- from it (a straggler's own, a counter seeded from the clock), the record
-- does not, so a reader takes the token from it.
-- Returns 1 when the lock is ours (counter now >= token), 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- Compare as canonical decimal strings: Lua numbers are doubles and would
-- round tokens above 2^53.
local cur = redis.call('GET', KEYS[2]) or '0'
local want = ARGV[2]
if #cur < #want or (#cur == #want and cur < want) then
  redis.call('SET', KEYS[2], want, 'PX', ARGV[5])
end
redis.call('HSET', KEYS[3], 'owner', ARGV[1], 'token', want, 'value', ARGV[4])
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  pttl = ARGV[3]
end
redis.call('PEXPIRE', KEYS[3], pttl)
return 1
