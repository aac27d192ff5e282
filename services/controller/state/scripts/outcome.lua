-- Store a replacement's verified restore outcome, give the task its prior awaiting value back
-- and count the outcome by type. Accepted only from the replacement's own credential, only
-- while it is the seat's current attempt, only when it matches the accepted directive. A
-- refusal reported earlier by the same attempt (a restarted sidecar that then restored) no
-- longer holds it once the verified outcome is stored. With that the seat is running again;
-- when nothing else is left (its lost attempt's Pod removed), it leaves the attention set.
-- KEYS[3] seat, [4] execution, [5] outcome, [6] task, [7] counters, [8] events, [9] refusal,
--   [10] attention, [11] the fence of the attempt it replaces.
-- ARGV[3] execution id, [4] credential id, [5] generation, [6] outcome fields,
--   [7] task recovery JSON, [8] at, [9] swarm, [10] detail JSON.
local execution = hgetall(KEYS[4])
local seat = hgetall(KEYS[3])
if execution.credential_id ~= ARGV[4] or execution.generation ~= ARGV[5]
    or execution.state ~= 'running' or seat.current ~= ARGV[3] then
  return reply({status = 'forbidden'})
end
if not execution.restores_from_execution then return reply({status = 'not_replacement'}) end
local outcome = cjson.decode(ARGV[6])
if redis.call('EXISTS', KEYS[5]) == 1 then
  local stored = hgetall(KEYS[5])
  for _, name in ipairs({'recovery', 'checkpoint_id', 'session_id', 'watermark'}) do
    if stored[name] ~= outcome[name] then return reply({status = 'conflict'}) end
  end
  return reply({status = 'repeated'})
end
for _, name in ipairs({'recovery', 'checkpoint_id', 'session_id'}) do
  if outcome[name] ~= execution['directive.' .. name] then
    return reply({status = 'mismatch', field = name})
  end
end
hset_map(KEYS[5], outcome)
redis.call('DEL', KEYS[9])
local task = hgetall(KEYS[6])
if task.held == '1' then
  redis.call('HSET', KEYS[6], 'awaiting', task.prior_awaiting or '', 'held', '0')
  redis.call('HDEL', KEYS[6], 'prior_awaiting')
end
redis.call('HSET', KEYS[6], 'recovery', ARGV[7])
redis.call('HINCRBY', KEYS[7], outcome.recovery, 1)
redis.call('HSET', KEYS[3], 'state', 'running')
settle_if_done(KEYS[10], KEYS[3], KEYS[4], KEYS[11], true)
local ev = event(KEYS[8], 'outcome', ARGV[9], seat.seat, ARGV[3], seat.generation,
  execution.generation, ARGV[10], ARGV[8])
return reply({status = 'stored', events = {ev}})
