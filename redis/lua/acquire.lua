-- Take a lock and hand out its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] token counter (same hash slot, never expires)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds
-- Returns {1, token as a decimal string} when taken, {0, pttl} when held (the holder's remaining ms).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' and token.err then
    -- A corrupt counter must not leave a lock without a token behind.
    redis.call('DEL', KEYS[1])
    return token
  end
  -- GET, not the INCR reply: Lua numbers are doubles, exact only to 2^53.
  return {1, redis.call('GET', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
