-- Extend a lock, only if it is still ours.
-- KEYS[1] lock key, KEYS[2] (optional) holder record, passed when the lock
-- was taken with a value: it is extended with the lock (the acquire wrote
-- it with the lock, so it is ours)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local n = redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[2] then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return n
end
return 0
