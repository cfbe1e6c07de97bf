-- Release a lock, only if it is still ours, and wake the waiters.
-- KEYS[1] lock key; ARGV[1] owner value, ARGV[2] release-notice channel
-- Returns 1 when released, 0 when the key is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
