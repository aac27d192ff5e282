-- A replacement reports that its restore was refused. The decision stays accepted and the
-- task's awaiting does not change; the refusal is kept for status and holds the attempt: the
-- pass neither fences nor replaces it (the seat reads restore_refused) until it is relaunched.
-- After a verified outcome a refusal contradicts it and is refused (conflict).
-- KEYS[3] seat, [4] execution, [5] refusal, [6] events, [7] outcome.
-- ARGV[3] execution id, [4] credential id, [5] generation, [6] reason, [7] at, [8] swarm,
--   [9] detail JSON.
local execution = hgetall(KEYS[4])
local seat = hgetall(KEYS[3])
if execution.credential_id ~= ARGV[4] or execution.generation ~= ARGV[5]
    or execution.state ~= 'running' or seat.current ~= ARGV[3] then
  return reply({status = 'forbidden'})
end
if not execution.restores_from_execution then return reply({status = 'not_replacement'}) end
if redis.call('EXISTS', KEYS[7]) == 1 then return reply({status = 'conflict'}) end
redis.call('HSET', KEYS[5], 'reason', ARGV[6], 'reported_at', ARGV[7])
redis.call('HINCRBY', KEYS[5], 'count', 1)
redis.call('HSET', KEYS[3], 'state', 'restore_refused')
local ev = event(KEYS[6], 'outcome', ARGV[8], seat.seat, ARGV[3], seat.generation,
  execution.generation, ARGV[9], ARGV[7])
return reply({status = 'stored', events = {ev}})
