-- Record that an admitted attempt's Pod was launched (the launch itself is idempotent). When
-- that leaves its seat nothing to do (running, no fence with a Pod still to remove), the seat
-- also leaves the pass's attention set. A launched current attempt is expected in the
-- runtime's list from now on (see keys.expected).
-- KEYS[3] execution, [4] seat, [5] attention, [6] the seat's latest fence (any key when none),
--   [7] expected.
-- ARGV[3] at, [4] seat name, [5] '1' when the seat has a fence.
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'missing'}) end
if redis.call('HGET', KEYS[3], 'launched') == '1' then return reply({status = 'already'}) end
redis.call('HSET', KEYS[3], 'launched', '1', 'launched_at', ARGV[3])
local seat = hgetall(KEYS[4])
local execution = redis.call('HGET', KEYS[3], 'execution_id')
if seat.current == execution and redis.call('HGET', KEYS[3], 'state') == 'running' then
  redis.call('HSET', KEYS[7], execution, '0')
end
if seat.current == execution then settle_if_done(KEYS[5], KEYS[4], KEYS[3], KEYS[6], ARGV[5] == '1') end
return reply({status = 'launched'})
