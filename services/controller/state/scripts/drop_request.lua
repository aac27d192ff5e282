-- Drop a request the pass applied, refused or found already decided.
-- KEYS[3] requests, [4] events.
-- ARGV[3] field, [4] execution id ('' records no event), [5] swarm, [6] seat, [7] detail JSON,
--   [8] at.
redis.call('HDEL', KEYS[3], ARGV[3])
if ARGV[4] == '' then return reply({status = 'dropped'}) end
local ev = event(KEYS[4], 'request', ARGV[5], ARGV[6], ARGV[4], 0, 0, ARGV[7], ARGV[8])
return reply({status = 'dropped', events = {ev}})
