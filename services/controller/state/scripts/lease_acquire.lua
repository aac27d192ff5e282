-- Acquire the swarm's lease: SET lease HOLDER NX PX ttl, and INCR the epoch on each acquisition.
-- KEYS[1] lease, KEYS[2] epoch; ARGV[1] holder, ARGV[2] ttl in milliseconds.
-- Returns the new epoch, or nil when another holder has it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false
