-- Accept a decision once per fenced attempt and admit its one replacement (the arbiter of
-- concurrent decisions, and the one check of a repeat or a conflict). A repeat of the accepted
-- choice changes nothing; a different choice is a conflict and changes nothing. Accepted or
-- repeated, the decision as stored comes back. A caller without a directive (resume without
-- a usable checkpoint, or a store it could not list) asks with ARGV[14] = '1': it learns of a
-- repeat or a conflict, and otherwise `unplanned`, with nothing written.
-- KEYS[3] fence, [4] decision, [5] fenced execution, [6] seat, [7] task, [8] replacement
--   execution, [9] slots, [10] accounts, [11] recovery-paused, [12] requests, [13] events,
--   [14] slots used per account.
-- ARGV[3] execution id, [4] choice, [5] decision fields, [6] replacement execution fields,
--   [7] task recovery JSON, [8] '1' when only an unpaused swarm may accept (automatic),
--   [9] request field to drop or '' (a repeat leaves it to the caller, which drops it with a
--   `request` event), [10] at, [11] swarm, [12] detail JSON, [13] offer or '', [14] '1' when
--   the caller has no directive (unplanned).
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local decision = hgetall(KEYS[4])
if decision.state == 'accepted' then
  if decision.choice == ARGV[4] then return reply({status = 'repeated', decision = decision}) end
  return reply({status = 'conflict'})
end
if ARGV[14] == '1' then return reply({status = 'unplanned'}) end
local fence = hgetall(KEYS[3])
for _, kind in ipairs({'launch_grant', 'store_grants', 'account_slot'}) do
  if not fence['release:' .. kind] then return reply({status = 'releasing'}) end
end
if ARGV[8] == '1' and redis.call('EXISTS', KEYS[11]) == 1 then
  return reply({status = 'paused'})
end
local seat = hgetall(KEYS[6])
if seat.current ~= ARGV[3] or hgetall(KEYS[5]).state ~= 'fenced' then
  return reply({status = 'not_current'})
end
if redis.call('EXISTS', KEYS[8]) == 1 then return reply({status = 'conflict'}) end
local replacement = cjson.decode(ARGV[6])
local usage = slot_usage(KEYS[10], KEYS[9], KEYS[14])
local account = take_slot(usage, KEYS[9], KEYS[14], replacement.execution_id)
if account then replacement.account = account end
-- The replacement starts from the task's current text, read from the ledger row now.
replacement.task_text = redis.call('HGET', KEYS[7], 'text') or ''
hset_map(KEYS[8], replacement)
local accepted = cjson.decode(ARGV[5])
accepted.execution_id = ARGV[3]
accepted.state = 'accepted'
accepted.controller_epoch = EPOCH
if ARGV[13] ~= '' and not decision.offer then accepted.offer = ARGV[13] end
hset_map(KEYS[4], accepted)
redis.call('HSET', KEYS[6], 'current', replacement.execution_id,
  'generation', replacement.generation, 'state', 'replacing')
redis.call('HSET', KEYS[7], 'recovery', ARGV[7])
if ARGV[9] ~= '' then redis.call('HDEL', KEYS[12], ARGV[9]) end
local ev = event(KEYS[13], 'recovery', ARGV[11], fence.seat, ARGV[3], fence.generation,
  seat.generation, ARGV[12], ARGV[10])
-- What it wrote comes back: the caller answers with the decision and launches the
-- replacement without reading them again.
return reply({status = 'accepted', events = {ev}, replacement = hgetall(KEYS[8]),
  seat = hgetall(KEYS[6]), decision = hgetall(KEYS[4])})
