-- Take a lock and hand out its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] token counter (same hash slot, never expires)
-- ARGV[1] owner value, ARGV[2] TTL in milliseconds,
-- ARGV[3] '1': the token is max(counter + 1, server TIME in µs) (single Redis:
--         a restarted or promoted node whose counter is missing or lagging
--         still hands out a larger token than any before, while the server
--         clocks differ by less than the restart or failover takes);
--         '0': a missing counter is seeded from TIME, an existing one INCRs
--         (Redlock: counters of healthy nodes move in step).
-- Returns {1, token as a decimal string} when taken, {0, pttl} when held (the holder's remaining ms).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
local cur = redis.call('GET', KEYS[2])
if cur == false or ARGV[3] == '1' then
  local t = redis.call('TIME')
  -- Strings, not Lua numbers (doubles): µs since the epoch, exact.
  local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  local nxt = nil
  if cur ~= false then
    local n = redis.pcall('INCR', KEYS[2])
    if type(n) == 'table' and n.err then
      -- A corrupt counter must not leave a lock without a token behind.
      redis.call('DEL', KEYS[1])
      return n
    end
    nxt = redis.call('GET', KEYS[2])
  end
  -- Compare canonical decimal strings: Lua numbers would round past 2^53.
  if nxt == false or nxt == nil or #nxt < #now or (#nxt == #now and nxt < now) then
    redis.call('SET', KEYS[2], now)
    return {1, now}
  end
  return {1, nxt}
end
local n = redis.pcall('INCR', KEYS[2])
if type(n) == 'table' and n.err then
  redis.call('DEL', KEYS[1])
  return n
end
-- GET, not the INCR reply: Lua numbers are doubles, exact only to 2^53.
return {1, redis.call('GET', KEYS[2])}
