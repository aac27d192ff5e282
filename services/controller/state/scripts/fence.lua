-- Fence the current attempt of a seat: one record, a second fence returns the first.
-- The fence copies the native session id and archive watermark the attempt held at this moment,
-- marks the attempt fenced and holds the task: its awaiting reads recovery_pending. The reply
-- carries the fence record it wrote and what deciding on it reads next (the attempt as fenced,
-- the swarm's config and pause switch; a new fence has no decision yet), so no read follows.
-- A replacement that reported a restore refusal is not fenced (status restore_refused): its
-- accepted decision stays in place for the master or operator, who fixes the cause and
-- relaunches it (see absent.lua).
-- Releases may come with the fence (as in release.lua), done and recorded in the same write;
-- what they revoke is read from the attempt's record here, so the caller reads nothing first.
-- The task's key is the task key prefix and the seat's task id, as the seat records it now.
-- KEYS[3] seat, [4] execution, [5] fence, [6] events, [7] attention, [8] refusal,
--   [9] expected, [10] slots, [11] slots used per account, [12] config, [13] paused.
-- ARGV[3] execution id, [4] observed generation, [5] reason, [6] at, [7] swarm,
--   [8] the task key prefix, [9] JSON list of the release kinds to do with it ('[]': none),
--   [10..13] as release.lua's ARGV[6..9] (the revocation key prefix, now, how long past its
--   issue a credential's revocation is kept, how long a store grant's is).
if redis.call('EXISTS', KEYS[5]) == 1 then return reply({status = 'exists'}) end
local seat = hgetall(KEYS[3])
local execution = hgetall(KEYS[4])
if seat.current ~= ARGV[3] or seat.generation ~= ARGV[4] or execution.state ~= 'running' then
  return reply({status = 'not_current', expected_generation = tonumber(seat.generation) or 0})
end
if redis.call('EXISTS', KEYS[8]) == 1 then return reply({status = 'restore_refused'}) end
local task_key = ARGV[8] .. seat.task_id
local fence = {
  execution_id = ARGV[3], swarm = ARGV[7], generation = ARGV[4], seat = seat.seat,
  reason = ARGV[5], controller_epoch = EPOCH, fenced_at = ARGV[6],
  task_id = execution.task_id, task_generation = execution.task_generation,
}
-- After the sidecar's final capture nothing the worker completed is unarchived: no lost tail.
local lost = execution.capture_final == '1' and 'none' or 'unknown'
local detail = {reason = ARGV[5], lost_tail = {length = lost}}
if lost == 'none' then fence.lost_tail = 'none' end
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
redis.call('SADD', KEYS[7], seat.seat)
redis.call('HDEL', KEYS[9], ARGV[3])
local task = hgetall(task_key)
if task.held ~= '1' then
  redis.call('HSET', task_key, 'prior_awaiting', task.awaiting or '', 'held', '1')
end
redis.call('HSET', task_key, 'awaiting', 'recovery_pending')
local kinds, revoke_keys, ttls = revocations(cjson.decode(ARGV[9]), execution,
  {ARGV[10], ARGV[11], ARGV[12], ARGV[13]})
local done, record = release_kinds(KEYS[5], KEYS[10], KEYS[11], ARGV[3], kinds, revoke_keys, ttls,
  ARGV[6])
for _, kind in ipairs(done) do fence['release:' .. kind] = record end
local ev = event(KEYS[6], 'fence', ARGV[7], seat.seat, ARGV[3], seat.generation, ARGV[4],
  cjson.encode(detail), ARGV[6])
return reply({status = 'fenced', events = {ev}, fence = fence, kind = table.concat(done, ','),
  execution = ARGV[3], attempt = execution, config = hgetall(KEYS[12]),
  paused = redis.call('EXISTS', KEYS[13])})
