-- Set or clear the swarm's recovery-paused switch. It is a key, so it survives a restart.
-- KEYS[3] recovery-paused; ARGV[3] '1' to pause, '0' to unpause, [4] at.
if ARGV[3] == '1' then
  redis.call('SET', KEYS[3], ARGV[4])
else
  redis.call('DEL', KEYS[3])
end
return reply({status = 'set'})
