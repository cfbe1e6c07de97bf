-- Release a lock, only if it is still ours, and wake the waiters.
-- KEYS[1] lock key, KEYS[2] the owner's tombstone key (unused, and any
-- key of the lock's slot, without a tombstone), KEYS[3] the lease's
-- refresh sequence (see refresh.lua), KEYS[4] (optional) holder record,
-- passed when the lock may have one
-- ARGV[1] owner value, ARGV[2] release-notice channel, ARGV[3] tombstone
-- TTL in milliseconds, or '0' for none
-- With a tombstone, the owner is remembered as released (even where the
-- lock is not there yet) for that long, in a key of its own (so another
-- owner's release cannot overwrite it), so that a request of this owner
-- still on its way (a late acquire or refresh copy) cannot set the lock
-- again after the release. The tombstone also keeps this release's outcome
-- ('1' freed the lock, '0' found it gone or someone else's): a copy of the
-- release that comes again (resent after a lost reply, or late) reports
-- what the first one did, and changes nothing. (A tombstone 'refused', left
-- by acquire.lua for a refused attempt, is no release: it becomes '0'.)
-- The holder record goes with the lock: it is ours, or a stale one of an
-- earlier holder (records are written only while their owner holds the
-- lock), so nobody else's.
-- Fair waits (see acquire.lua), with ARGV[4] only: ARGV[4] the hand-off
-- window in ms, ARGV[5] '1' when the lock may have a holder record (KEYS[4]
-- is always given), KEYS[5] and KEYS[6] the waiters and their deadlines.
-- The first waiter has a window from the release to come and take the
-- lock: a notice on its own channel wakes it, and only it (the others come
-- back every window); past that, its place lapses.
-- Returns 1 when released, 0 when the key is gone or someone else's.
local tomb = tonumber(ARGV[3])
-- mark leaves the tombstone, never shortened: a give-back's longer one may
-- have come first (one command when there is none yet, the usual case).
local function mark(outcome)
  if not redis.call('SET', KEYS[2], outcome, 'PX', tomb, 'NX') then
    redis.call('SET', KEYS[2], outcome, 'PX', math.max(tomb, redis.call('PTTL', KEYS[2])))
  end
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if tomb > 0 then
    local before = redis.call('GET', KEYS[2])
    if before == '1' or before == '0' then
      return tonumber(before)
    end
    mark('0')
  end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
if KEYS[4] and ARGV[5] ~= '0' then
  redis.call('DEL', KEYS[4])
end
if tomb > 0 then
  mark('1')
end
-- A notice is best effort: a PUBLISH the client may not send (an ACL
-- without the channel) must not fail the release done above.
if ARGV[4] then
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if head then
    local t = redis.call('TIME')
    local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[6], 'XX', 'LT', nowms + tonumber(ARGV[4]), head)
    redis.pcall('PUBLISH', ARGV[2] .. ':' .. head, '') -- its turn (Keys.WaiterChannel)
  end
end
redis.pcall('PUBLISH', ARGV[2], '') -- watchers, and waiters that race
return 1
