-- Acquire the swarm's lease: SET lease HOLDER NX PX ttl, and INCR the epoch on each acquisition.
-- KEYS[1] lease, KEYS[2] epoch; ARGV[1] holder, ARGV[2] ttl in milliseconds.
-- Returns the new epoch, or nil when another holder has it. A lease that already names this
-- holder (an acquisition whose reply was lost, or a Redis outage shorter than the TTL) is still
-- the same acquisition: its TTL is renewed and its epoch returned, unchanged (the epoch key only
-- moves when the lease is taken, so while the lease names this holder it holds its epoch).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]))
end
return false
