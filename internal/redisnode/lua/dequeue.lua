-- Take a waiter out of a lock's fair queue (see acquire.lua): its Acquire
-- ended without the lock. If it was first and the lock is free, a notice
-- on the next waiter's channel wakes it.
-- KEYS[1] lock key, KEYS[2] the waiters, KEYS[3] their deadlines
-- ARGV[1] the waiter, ARGV[2] release-notice channel
-- Returns 1 when the waiter was queued, 0 when not.
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local n = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.pcall('PUBLISH', ARGV[2] .. ':' .. next, '') -- its turn; best effort, as in release.lua
  end
end
return n
