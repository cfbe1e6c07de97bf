
-- Runs `one` (the single-lock script above, as a function of its KEYS and
-- ARGV) for each of several locks, so a batched refresh pays one script
-- call per batch instead of one per lock.
-- ARGV holds, per lock: its key count, its argument count, its arguments;
-- KEYS holds each lock's keys in the same order.
-- Returns one reply per lock: the script's own, or an error reply for that
-- lock alone (a wrong-type key fails its lock, not the batch).
local out, ki, ai, i = {}, 0, 1, 0
while ai <= #ARGV do
  local nk, na = tonumber(ARGV[ai]), tonumber(ARGV[ai + 1])
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[ki + j] end
  for j = 1, na do args[j] = ARGV[ai + 1 + j] end
  ki, ai, i = ki + nk, ai + 2 + na, i + 1
  local ok, r = pcall(one, keys, args)
  if not ok then
    if type(r) == 'table' and r.err then
      r = {err = r.err}
    else
      r = {err = tostring(r)}
    end
  elseif r == nil then
    r = false
  end
  out[i] = r
end
return out
