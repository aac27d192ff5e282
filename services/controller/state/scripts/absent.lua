-- The runtime's list did not show an expected attempt in this pass. Count the consecutive
-- passes; once the count reaches the threshold (so a Pod still being created is not taken for
-- a lost one):
-- * a replacement holding a restore refusal was deleted by the operator to relaunch it: the
--   refusal is cleared and the attempt recorded as not launched, so the pass launches the same
--   execution again (same directive, id and generation), once per disappearance;
-- * any other attempt's Pod was removed from under it: `evict` (the caller fences it evicted).
-- An entry that no longer names the seat's launched, running attempt is dropped.
-- KEYS[3] seat, [4] execution, [5] refusal, [6] expected, [7] attention, [8] events.
-- ARGV[3] execution id, [4] generation, [5] threshold, [6] at, [7] swarm.
if redis.call('HEXISTS', KEYS[6], ARGV[3]) == 0 then return reply({status = 'stale'}) end
local seat = hgetall(KEYS[3])
local execution = hgetall(KEYS[4])
if seat.current ~= ARGV[3] or execution.generation ~= ARGV[4] or execution.state ~= 'running'
    or execution.launched ~= '1' then
  redis.call('HDEL', KEYS[6], ARGV[3])
  return reply({status = 'stale'})
end
local passes = redis.call('HINCRBY', KEYS[6], ARGV[3], 1)
if passes < tonumber(ARGV[5]) then return reply({status = 'counted', passes = passes}) end
if redis.call('EXISTS', KEYS[5]) == 0 then return reply({status = 'evict', passes = passes}) end
local refusal = hgetall(KEYS[5])
redis.call('DEL', KEYS[5])
redis.call('HDEL', KEYS[6], ARGV[3])
local relaunches = redis.call('HINCRBY', KEYS[4], 'relaunches', 1)
redis.call('HSET', KEYS[4], 'launched', '0', 'relaunched_at', ARGV[6])
redis.call('SADD', KEYS[7], seat.seat)
if seat.state == 'restore_refused' then redis.call('HSET', KEYS[3], 'state', 'replacing') end
local detail = cjson.encode({action = 'relaunch', cleared_refusal = refusal.reason,
                             relaunches = relaunches, absent_passes = passes})
local ev = event(KEYS[8], 'recovery', ARGV[7], seat.seat, ARGV[3], seat.generation,
  execution.generation, detail, ARGV[6])
return reply({status = 'relaunch', passes = passes, events = {ev}})
