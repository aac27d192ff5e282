-- Declare or update a swarm. New seats get their first attempt (generation 1); existing seats
-- get their task text updated and nothing else: running attempts are not touched.
-- KEYS[3] config, [4] masters, [5] accounts, [6] seats, [7] slots, [8] attention, [9] slots
--   used per account, then per seat i (1-based): [7+3i] seat, [8+3i] task, [9+3i] first
--   execution.
-- ARGV[3] config fields, [4] masters (agent -> sha256), [5] accounts (name -> slots),
--   [6] seats: [{seat, order, text, execution_id, seat_fields, task_fields, execution_fields}].
redis.call('DEL', KEYS[3])
hset_map(KEYS[3], cjson.decode(ARGV[3]))
redis.call('DEL', KEYS[4])
hset_map(KEYS[4], cjson.decode(ARGV[4]))
redis.call('DEL', KEYS[5])
hset_map(KEYS[5], cjson.decode(ARGV[5]))
local admitted, updated = {}, {}
local usage = slot_usage(KEYS[5], KEYS[7], KEYS[9])
for i, s in ipairs(cjson.decode(ARGV[6])) do
  local seat_key, task_key, execution_key = KEYS[7 + 3 * i], KEYS[8 + 3 * i], KEYS[9 + 3 * i]
  if redis.call('EXISTS', seat_key) == 1 then
    if redis.call('HGET', task_key, 'text') ~= s.text then
      redis.call('HSET', task_key, 'text', s.text)
      updated[#updated + 1] = s.seat
    end
  else
    hset_map(seat_key, s.seat_fields)
    hset_map(task_key, s.task_fields)
    local execution = s.execution_fields
    local account = take_slot(usage, KEYS[7], KEYS[9], s.execution_id)
    if account then execution.account = account end
    execution.task_text = s.text
    hset_map(execution_key, execution)
    redis.call('ZADD', KEYS[6], s.order, s.seat)
    redis.call('SADD', KEYS[8], s.seat)
    admitted[#admitted + 1] = s.execution_id
  end
end
return reply({status = 'applied', admitted = admitted, updated = updated})
