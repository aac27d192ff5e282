-- Acquire the swarm's lease: SET lease HOLDER NX PX ttl, and INCR the epoch on each acquisition.
-- KEYS[1] lease, KEYS[2] epoch; ARGV[1] holder, ARGV[2] ttl in milliseconds, ARGV[3] floor: an
-- epoch already used for this swarm (the newest this controller held, or one a worker Pod was
-- launched under), so the epoch never goes back to it or below, even when Redis lost the
-- epoch key (restarted empty, or an older copy promoted).
-- Returns the new epoch, or nil when another holder has it. A lease that already names this
-- holder (an acquisition whose reply was lost, or a Redis outage shorter than the TTL) is still
-- the same acquisition: its TTL is renewed and its epoch returned, unchanged (the epoch key only
-- moves when the lease is taken, so while the lease names this holder it holds its epoch),
-- unless it is below the floor: then it moves past the floor. A new acquisition's epoch is
-- always past the floor.
local floor = tonumber(ARGV[3])

local function at_least(epoch, least)
  if epoch < least then
    epoch = floor + 1
    redis.call('SET', KEYS[2], epoch)
  end
  return epoch
end

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return at_least(redis.call('INCR', KEYS[2]), floor + 1)
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return at_least(tonumber(redis.call('GET', KEYS[2])) or 0, floor)
end
return false
