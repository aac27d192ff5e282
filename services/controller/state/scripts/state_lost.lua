-- Record that Redis lost the swarm's state (`losses`), or that it came back: what status and
-- every replica's readers show while the holder waits for the operator.
-- KEYS[3] the swarm's state-lost marker; ARGV[3] the loss as JSON, or '' to clear it.
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3])
else
  redis.call('DEL', KEYS[3])
end
return reply({status = 'marked'})
