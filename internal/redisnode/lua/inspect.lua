-- Read a lock without changing anything (no write: safe on any node).
-- KEYS[1] lock key, KEYS[2] token counter, KEYS[3] holder record,
-- KEYS[4] (optional) the fair queue's waiter deadlines (see acquire.lua)
-- Returns {0} when the lock is free; else {1, owner, pttl, counter or
-- false} and, when the holder record is the current owner's (never an
-- earlier holder's left to expire), its token and value after them.
-- With KEYS[4], the number of waiters whose place has not lapsed comes
-- last: {0, n} when free, else at index 7 (token and value false when
-- there is no record of the owner).
local waiters
if KEYS[4] then
  local t = redis.call('TIME')
  local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  waiters = redis.call('ZCOUNT', KEYS[4], nowms, '+inf')
end
local owner = redis.call('GET', KEYS[1])
if not owner then
  if waiters then
    return {0, waiters}
  end
  return {0}
end
local res = {1, owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
local rec = redis.call('HMGET', KEYS[3], 'owner', 'token', 'value')
if rec[1] == owner then
  res[5] = rec[2]
  res[6] = rec[3]
end
if waiters then
  res[5] = res[5] or false
  res[6] = res[6] or false
  res[7] = waiters
end
return res
