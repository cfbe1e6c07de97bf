-- Extend many Redlock locks in one call, each only where it is plainly still
-- ours: extend.lua's first branch, run for each lock in turn. A lock this
-- call does not extend (missing, someone else's, an error) gets 0, and the
-- client sends extend.lua for it alone: the repair path stays per lock,
-- routed by the lock's own key. So a call that reaches the wrong server (a
-- proxy routing by its first key) can only say 0: it writes nothing unless
-- the lock there holds our owner value, which only our own calls, routed by
-- that key, ever write.
-- For lock i (from 1): KEYS[3i-2] lock key, KEYS[3i-1] retake marker,
-- KEYS[3i] holder record; ARGV[5i-4..5i] owner value, TTL in milliseconds,
-- the lease's token (decimal), the refresh's nonce, the holder's value.
-- Returns one integer per lock: 1 extended, 2 taken back by this very
-- refresh (the call resent after an extend.lua of it, as extend.lua says),
-- 0 left to extend.lua.
local function held(lock, retake, holder, owner, ttl, token, nonce, value)
  if redis.call('GET', lock) ~= owner then
    return 0
  end
  if redis.call('GET', retake) == nonce then
    return 2
  end
  local n = redis.call('PEXPIRE', lock, ttl)
  if redis.call('HGET', holder, 'owner') ~= owner then
    redis.call('HSET', holder, 'owner', owner, 'token', token, 'value', value)
  end
  redis.call('PEXPIRE', holder, ttl)
  return n
end
local out = {}
for i = 1, #KEYS / 3 do
  local a = 5 * (i - 1)
  local ok, r = pcall(held, KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i],
    ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
  if ok then
    out[i] = r
  else
    out[i] = 0 -- extend.lua reports the error
  end
end
return out
