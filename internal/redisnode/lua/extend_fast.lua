-- Redlock refresh, the common case: extend our lock and its holder record
-- when both are ours and this refresh did not take the lock back (a resend
-- must still say so); otherwise change nothing and return -1, and the
-- caller runs the repairing extend (extend.lua) for this lock. The reads
-- are pcalls: a key of the wrong type (not ours to judge) also goes to
-- extend.lua, so every outcome, error or not, is extend.lua's.
-- KEYS[1] lock key, KEYS[2] holder record, KEYS[3] retake marker, KEYS[4]
-- the lease's refresh sequence (see refresh.lua)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds, ARGV[3] the refresh's
-- nonce, ARGV[4] its sequence number, ARGV[5] how long the sequence
-- outlives the lock (see refresh.lua)
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local marker = redis.pcall('GET', KEYS[3])
if type(marker) == 'table' or marker == ARGV[3] then
  return -1
end
if redis.pcall('HGET', KEYS[2], 'owner') ~= ARGV[1] then
  return -1
end
local last = redis.pcall('GET', KEYS[4])
if type(last) == 'table' then
  return -1
end
if last then
  local n, owner = string.match(last, '^(%d+):(.*)$')
  if owner == ARGV[1] and tonumber(n) > tonumber(ARGV[4]) then
    return 1 -- a newer refresh ran: this late copy changes nothing
  end
end
redis.call('SET', KEYS[4], ARGV[4] .. ':' .. ARGV[1], 'PX', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
