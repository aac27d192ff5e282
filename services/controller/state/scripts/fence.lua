-- Fence the current attempt of a seat: one record, a second fence returns the first.
-- The fence copies the native session id and archive watermark the attempt held at this moment,
-- marks the attempt fenced and holds the task: its awaiting reads recovery_pending. The reply
-- carries the fence record it wrote and what deciding on it reads next (the attempt as fenced,
-- the swarm's config and pause switch; a new fence has no decision yet), so no read follows.
-- A replacement that reported a restore refusal is not fenced (status restore_refused): its
-- accepted decision stays in place for the master or operator, who fixes the cause and
-- relaunches it (see absent.lua).
-- Releases may come with the fence (as in release.lua), done and recorded in the same write.
-- KEYS[3] seat, [4] execution, [5] fence, [6] task, [7] events, [8] attention, [9] refusal,
--   [10] expected, [11] slots, [12] slots used per account, [13] config, [14] paused,
--   [15..] revocation keys.
-- ARGV[3] execution id, [4] observed generation, [5] reason, [6] at, [7] swarm,
--   [8] JSON list of [release kind, how many of the revocation keys are its own] ('[]': none),
--   [9..] TTL in seconds of each revocation key.
if redis.call('EXISTS', KEYS[5]) == 1 then return reply({status = 'exists'}) end
local seat = hgetall(KEYS[3])
local execution = hgetall(KEYS[4])
if seat.current ~= ARGV[3] or seat.generation ~= ARGV[4] or execution.state ~= 'running' then
  return reply({status = 'not_current', expected_generation = tonumber(seat.generation) or 0})
end
if redis.call('EXISTS', KEYS[9]) == 1 then return reply({status = 'restore_refused'}) end
local fence = {
  execution_id = ARGV[3], swarm = ARGV[7], generation = ARGV[4], seat = seat.seat,
  reason = ARGV[5], controller_epoch = EPOCH, fenced_at = ARGV[6],
  task_id = execution.task_id, task_generation = execution.task_generation,
}
local detail = {reason = ARGV[5], lost_tail = {length = 'unknown'}}
if execution.native_session_id then
  fence.native_session_id = execution.native_session_id
  detail.native_session_id = execution.native_session_id
end
if execution.archive_watermark then
  fence.archive_watermark = execution.archive_watermark
  detail.archive_watermark = tonumber(execution.archive_watermark)
  detail.lost_tail.after_watermark = tonumber(execution.archive_watermark)
end
hset_map(KEYS[5], fence)
redis.call('HSET', KEYS[4], 'state', 'fenced')
execution.state = 'fenced'
redis.call('HSET', KEYS[3], 'state', 'fenced', 'fenced_execution', ARGV[3])
redis.call('SADD', KEYS[8], seat.seat)
redis.call('HDEL', KEYS[10], ARGV[3])
local task = hgetall(KEYS[6])
if task.held ~= '1' then
  redis.call('HSET', KEYS[6], 'prior_awaiting', task.awaiting or '', 'held', '1')
end
redis.call('HSET', KEYS[6], 'awaiting', 'recovery_pending')
local revoke_keys, ttls = {}, {}
for i = 15, #KEYS do
  revoke_keys[#revoke_keys + 1] = KEYS[i]
  ttls[#ttls + 1] = ARGV[i - 6]
end
local done, record = release_kinds(KEYS[5], KEYS[11], KEYS[12], ARGV[3], cjson.decode(ARGV[8]),
  revoke_keys, ttls, ARGV[6])
for _, kind in ipairs(done) do fence['release:' .. kind] = record end
local ev = event(KEYS[7], 'fence', ARGV[7], seat.seat, ARGV[3], seat.generation, ARGV[4],
  cjson.encode(detail), ARGV[6])
return reply({status = 'fenced', events = {ev}, fence = fence, kind = table.concat(done, ','),
  execution = ARGV[3], attempt = execution, config = hgetall(KEYS[13]),
  paused = redis.call('EXISTS', KEYS[14])})
