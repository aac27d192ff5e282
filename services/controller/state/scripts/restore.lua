-- Write back a decision Redis lost, from the replacement Pod that carries it (the cluster's
-- second witness, see witnesses.py): a running labelled Pod of a generation the seat does not
-- know yet, whose annotation names the seat's current attempt as the one it replaces.
-- What is written is what the lost writes had written: the fence of the replaced attempt with
-- the reason and epoch the Pod names (the true failure reason, never `evicted`), its authority
-- released (as fence.lua does), the decision accepted as the Pod names it, the replacement's
-- record (launched, expected in the list, its account slot taken again), the seat at the new
-- generation (replacing: its outcome is awaited) and the task's recovery field. A decision already accepted for the replaced
-- attempt is kept (`conflict`); a seat already at (or past) the Pod's generation is left alone
-- (`known`): generations never go backwards, and a repeat writes nothing.
-- KEYS[3] seat, [4] replaced execution, [5] its fence, [6] its decision, [7] replacement
--   execution, [8] task, [9] attention, [10] expected, [11] slots, [12] slots used per
--   account, [13] events.
-- ARGV[3] replaced execution id, [4] replaced generation, [5] replacement execution id,
--   [6] replacement generation, [7] fence fields JSON, [8] decision fields JSON,
--   [9] replacement execution fields JSON, [10] task recovery JSON, [11] at, [12] swarm,
--   [13] detail JSON, [14] JSON list of the release kinds to do, [15..18] as release.lua's
--   ARGV[6..9] (the revocation key prefix, now, how long a credential's and a store grant's
--   revocations are kept).
local seat = hgetall(KEYS[3])
if seat.seat == nil then return reply({status = 'no_seat'}) end
local generation = tonumber(ARGV[6])
if (tonumber(seat.generation) or 0) >= generation or redis.call('EXISTS', KEYS[7]) == 1 then
  return reply({status = 'known'})
end
local replaced = hgetall(KEYS[4])
if seat.current ~= ARGV[3] or seat.generation ~= ARGV[4] or replaced.execution_id == nil then
  -- Redis lost more than the one step this Pod witnesses: nothing is guessed.
  return reply({status = 'diverged', expected_generation = tonumber(seat.generation) or 0})
end
local decision = hgetall(KEYS[6])
if decision.state == 'accepted' then return reply({status = 'conflict'}) end
local witnessed = cjson.decode(ARGV[7])
local fence
if redis.call('EXISTS', KEYS[5]) == 1 then
  -- Fenced again after the loss (a missing Pod counts as evicted): the Pod knows the reason.
  redis.call('HSET', KEYS[5], 'reason', witnessed.reason,
    'controller_epoch', witnessed.controller_epoch)
  fence = hgetall(KEYS[5])
else
  fence = witnessed
  hset_map(KEYS[5], fence)
end
redis.call('HSET', KEYS[4], 'state', 'fenced')
replaced.state = 'fenced'
redis.call('HDEL', KEYS[10], ARGV[3])
local kinds, revoke_keys, ttls = revocations(cjson.decode(ARGV[14]), replaced,
  {ARGV[15], ARGV[16], ARGV[17], ARGV[18]})
release_kinds(KEYS[5], KEYS[11], KEYS[12], ARGV[3], kinds, revoke_keys, ttls, ARGV[11])
-- The task is held as a fence holds it, with the lost decision's directive on its row.
local task = hgetall(KEYS[8])
if task.held ~= '1' then
  redis.call('HSET', KEYS[8], 'prior_awaiting', task.awaiting or '', 'held', '1')
end
redis.call('HSET', KEYS[8], 'awaiting', 'recovery_pending', 'recovery', ARGV[10])
local accepted = cjson.decode(ARGV[8])
if decision.offer then accepted.offer = decision.offer end
if decision.offer_key then accepted.offer_key = decision.offer_key end
hset_map(KEYS[6], accepted)
local replacement = cjson.decode(ARGV[9])
replacement.task_text = task.text or ''
hset_map(KEYS[7], replacement)
slot_counts(KEYS[11], KEYS[12])
if replacement.account and redis.call('HEXISTS', KEYS[11], ARGV[5]) == 0 then
  redis.call('HSET', KEYS[11], ARGV[5], replacement.account)
  redis.call('HINCRBY', KEYS[12], replacement.account, 1)
end
-- Replacing until the replacement reports its outcome, as after an accepted decision.
redis.call('HSET', KEYS[3], 'current', ARGV[5], 'generation', ARGV[6], 'state', 'replacing',
  'fenced_execution', ARGV[3])
redis.call('HSET', KEYS[10], ARGV[5], '0')
-- On the attention set until the replaced attempt's Pod is recorded removed.
redis.call('SADD', KEYS[9], seat.seat)
local ev = event(KEYS[13], 'recovery', ARGV[12], seat.seat, ARGV[3], ARGV[4], ARGV[6],
  ARGV[13], ARGV[11])
return reply({status = 'restored', events = {ev}})
