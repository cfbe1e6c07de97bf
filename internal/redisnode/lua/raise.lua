-- Redlock phase 2: raise the token counter to at least ARGV[2], only while
-- the lock still holds our owner value.
-- KEYS[1] lock key, KEYS[2] token counter; ARGV[1] owner, ARGV[2] token (decimal)
-- Returns 1 when the lock is ours (counter now >= token), 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
-- Compare as canonical decimal strings: Lua numbers are doubles and would
-- round tokens above 2^53.
local cur = redis.call('GET', KEYS[2]) or '0'
local want = ARGV[2]
if #cur < #want or (#cur == #want and cur < want) then
  redis.call('SET', KEYS[2], want)
end
return 1
