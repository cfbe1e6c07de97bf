-- Read a lock without changing anything (no write: safe on any node).
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] holder record
-- Returns {0} when the lock is free; else {1, owner, pttl, counter or
-- false} and, when the holder record is the current owner's (never an
-- earlier holder's left to expire), its token and value after them.
local owner = redis.call('GET', KEYS[1])
if not owner then
  return {0}
end
local res = {1, owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
local rec = redis.call('HMGET', KEYS[3], 'owner', 'token', 'value')
if rec[1] == owner then
  res[5] = rec[2]
  res[6] = rec[3]
end
return res
