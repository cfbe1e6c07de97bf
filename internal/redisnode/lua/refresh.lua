-- Extend a lock, only if it is still ours and no later refresh of the same
-- lease has run: a copy of an older refresh that lands late (go-redis
-- resent it after a read timeout, and the resend was answered) must not
-- shorten or lengthen what the newer one set.
-- KEYS[1] lock key, KEYS[2] the lease's refresh sequence ("<seq>:<owner>"),
-- KEYS[3] the token counter (kept while the lock lasts: Inspect reads the
-- holder's token there), KEYS[4] (optional) holder record, passed when the
-- lock was taken with a value: it is extended with the lock
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds, ARGV[3] this refresh's
-- sequence number (the lease's refreshes count up from 1), ARGV[4] how long
-- the sequence outlives the lock, in milliseconds (a late copy may land
-- after the lock expired; Redlock's extend.lua would take it back), ARGV[5]
-- how long the counter outlives the lock (see acquire.lua)
-- Returns 1 when extended (or when a newer refresh already did: the reply
-- of such a copy reaches nobody), 0 when the key is gone or someone else's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local last = redis.call('GET', KEYS[2])
if last then
  local n, owner = string.match(last, '^(%d+):(.*)$')
  if owner == ARGV[1] and tonumber(n) > tonumber(ARGV[3]) then
    return 1
  end
end
redis.call('SET', KEYS[2], ARGV[3] .. ':' .. ARGV[1], 'PX', ARGV[4])
local n = redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if KEYS[4] then
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return n
