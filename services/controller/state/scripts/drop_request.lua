-- Drop a request the pass applied or refused.
-- KEYS[3] requests; ARGV[3] field.
redis.call('HDEL', KEYS[3], ARGV[3])
return reply({status = 'dropped'})
