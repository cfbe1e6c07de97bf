-- Take a lock and hand out its fencing token, in one round trip.
-- KEYS[1] lock key, KEYS[2] token counter (same hash slot, expiring ARGV[4]
-- after the last grant),
-- KEYS[3] this owner's tombstone key (set by a release of it, see release.lua,
-- or by this script when it refuses the attempt),
-- KEYS[4] (with ARGV[5] only) holder record (a hash: owner, token, value)
-- ARGV[1] owner value (unique to the attempt), ARGV[2] TTL in milliseconds,
-- ARGV[3] how long a refused attempt is remembered, in milliseconds: a copy
-- of it that lands later (go-redis resent it past its read timeout while
-- the first copy was held up) must not take the lock once it is free,
-- ARGV[4] how long the token counter outlives this grant, in milliseconds
-- (the lock's TTL and an hour: see below),
-- ARGV[5] (optional) the holder's value: when given and not '', the record
-- is written with the lock and expires with it; without it nothing else is
-- touched
-- Fair waits (the redis backend's WithFairQueue), with ARGV[6] only:
-- ARGV[6] the waiter (the same on every attempt of one waiting Acquire),
-- ARGV[7] the hand-off window in ms, ARGV[8] the release-notice channel;
-- KEYS[5] the waiters in the order they came (score: µs), KEYS[6] each
-- waiter's deadline (ms). A waiter takes a free lock only when no live
-- waiter came before it; until then it is queued and told how long to wait. A place lapses when its waiter does not
-- come back by its deadline; once the lock is free, the first waiter's is a
-- window away at most, so a waiter that vanished holds the others up for
-- about a window.
-- The token is max(counter + 1, the server's TIME in µs): a node restarted
-- without its counter, from an older snapshot, or a promoted replica whose
-- counter lags still hands out a larger token than any before, as long as
-- server clocks differ by less than the restart or failover takes. For the
-- same reason the counter may expire once it is an hour past its last
-- grant's lock: the clock has passed it by then, unless it steps back by
-- more than that, so a key locked once leaves nothing behind for long.
-- Returns the token as a decimal string when taken, the holder's remaining
-- ms (PTTL, an integer) when held: one value, no array, for the client to
-- decode.
-- Four commands when the lock is free (this runs on every acquire).
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- This attempt was refused or given back already: a late copy of it must
  -- not take the lock for nobody. (Its lock cannot be there: the release
  -- that left the tombstone deleted it.)
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = 0
  end
  return pttl
end
local waiter, nowms, nowus = ARGV[6], 0, 0
local function clock()
  local t = redis.call('TIME')
  nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- queue keeps the waiter in line (joining at the back if it is new) until
-- its deadline, and returns wait. The deadline is generous (wait, a window
-- and placeSlack ms): a client may come back later than told (its back-off
-- jitter, a slow host), and a long place costs nothing while others are
-- ahead of it; the first waiter's is cut to a window as soon as the lock is
-- seen free (a release, or another waiter's look).
local placeSlack = 5000
-- refuse remembers this attempt as refused (see ARGV[3]); not as released:
-- Redlock's refresh may still take a lock back for this owner where a node
-- refused its attempt (extend.lua).
local function refuse()
  redis.call('SET', KEYS[3], 'refused', 'PX', ARGV[3])
end
local function queue(wait)
  if nowus == 0 then
    clock()
  end
  redis.call('ZADD', KEYS[5], 'NX', nowus, waiter)
  redis.call('ZADD', KEYS[6], nowms + wait + tonumber(ARGV[7]) + placeSlack, waiter)
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')[2]
  redis.call('PEXPIREAT', KEYS[5], last)
  redis.call('PEXPIREAT', KEYS[6], last)
  return wait
end
local first = false -- this waiter is at the head of the queue
if waiter then
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if head then
    clock()
    local lapsed = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. nowms)
    for i = 1, #lapsed, 1000 do -- unpack is bounded by Lua's stack
      local j = math.min(i + 999, #lapsed)
      redis.call('ZREM', KEYS[5], unpack(lapsed, i, j))
      redis.call('ZREM', KEYS[6], unpack(lapsed, i, j))
    end
    -- The first live waiter (one without a deadline, the other key having
    -- been evicted or edited, counts as lapsed).
    head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
    while head and not redis.call('ZSCORE', KEYS[6], head) do
      redis.call('ZREM', KEYS[5], head)
      head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
    end
  end
  if head and head ~= waiter then
    -- Someone came first: wait for the holder, or for the first waiter's
    -- turn, but at most a window (release notices name the first waiter
    -- only, so the others look again: one of them is next if it is gone).
    local cur = redis.call('GET', KEYS[1])
    if cur == ARGV[1] then
      -- A resent attempt whose first copy took the lock: it is ours.
      redis.call('ZREM', KEYS[5], waiter)
      redis.call('ZREM', KEYS[6], waiter)
      return redis.call('GET', KEYS[2])
    end
    local wait
    if cur then
      wait = redis.call('PTTL', KEYS[1])
    else
      -- Free: the first waiter has one window from when it is first seen
      -- free with that waiter first (after a release, a lapse, a dequeue).
      redis.call('ZADD', KEYS[6], 'XX', 'LT', nowms + tonumber(ARGV[7]), head)
      wait = tonumber(redis.call('ZSCORE', KEYS[6], head)) - nowms
    end
    refuse()
    return queue(math.max(math.min(wait, tonumber(ARGV[7])), 1))
  end
  first = head == waiter
end
-- Set if free, and the holder's value either way (Redis 7.0+).
local cur = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if first and (not cur or cur == ARGV[1]) then
  redis.call('ZREM', KEYS[5], waiter)
  redis.call('ZREM', KEYS[6], waiter)
end
-- A grant to a queued waiter comes a notice round trip after the release:
-- a notice on the release channel, where only watchers (Watch, election
-- observers) and racing waiters listen, tells them of the new holder; they
-- might otherwise have looked in between and then wait for their next poll.
local announce = first and not cur
if cur == ARGV[1] then
  -- A retry of this very attempt (the client resent it after losing the
  -- reply): the lock is already ours, and nobody can have been granted a
  -- token since, so the counter is this attempt's token.
  return redis.call('GET', KEYS[2])
end
if cur then
  refuse()
  local pttl = redis.call('PTTL', KEYS[1])
  if waiter then
    return queue(math.max(pttl, 1))
  end
  return pttl
end
-- From here on the lock is set: every failure must take it back, so that
-- an acquire that fails leaves no lock without a token behind.
local function fail(err)
  redis.call('DEL', KEYS[1])
  return err
end
-- Strings, not Lua numbers (doubles, exact only to 2^53): the counter as
-- Redis stores it, and µs since the epoch, compared as canonical decimals.
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local token = redis.pcall('SET', KEYS[2], now, 'PX', ARGV[4], 'GET')
if type(token) == 'table' and token.err then
  return fail(token) -- not a string (WRONGTYPE): left as it was
end
if token and not string.match(token, '^-?%d+$') then
  redis.call('SET', KEYS[2], token, 'PX', ARGV[4])
  return fail(redis.error_reply('ERR token counter ' .. KEYS[2] .. ' is not an integer'))
end
if not token or string.sub(token, 1, 1) == '-' or #token < #now or (#token == #now and token < now) then
  token = now
else
  -- The counter was at or past the clock (a clock stepped back, or a
  -- counter raised by Redlock's phase 2 from a node whose clock runs ahead):
  -- one past it, in Redis' exact integers (INCR keeps the expiry).
  redis.call('SET', KEYS[2], token, 'KEEPTTL')
  local n = redis.pcall('INCR', KEYS[2])
  if type(n) == 'table' and n.err then
    return fail(n)
  end
  token = redis.call('GET', KEYS[2])
end
if ARGV[5] and ARGV[5] ~= '' then
  redis.call('HSET', KEYS[4], 'owner', ARGV[1], 'token', token, 'value', ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
if announce then
  redis.pcall('PUBLISH', ARGV[8], '') -- best effort, as in release.lua
end
return token
