-- Record a restore-decision request for the next pass, deduplicated by attempt and choice.
-- KEYS[3] requests; ARGV[3] field, [4] request JSON.
if redis.call('HSETNX', KEYS[3], ARGV[3], ARGV[4]) == 1 then
  return reply({status = 'recorded'})
end
return reply({status = 'exists'})
