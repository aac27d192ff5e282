-- Record that an admitted attempt's Pod was launched (the launch itself is idempotent). When
-- that leaves its seat nothing to do (running, no fence with a Pod still to remove), the seat
-- also leaves the pass's attention set. A launched current attempt is expected in the
-- runtime's list from now on (see keys.expected).
-- A replacement launched after its seat's fenced attempt's Pod was removed records that removal
-- too (release:pod in the fence, as release.lua does): one write for both.
-- KEYS[3] execution, [4] seat, [5] attention, [6] the seat's latest fence (any key when none),
--   [7] expected, [8] the fence of the attempt whose Pod was removed (any key when none).
-- ARGV[3] at, [4] '1' when the seat has a fence, [5] '1' when a fenced attempt's Pod was
--   removed (KEYS[8] its fence).
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'missing'}) end
local released = ''
if ARGV[5] == '1' and redis.call('EXISTS', KEYS[8]) == 1 then
  local done = release_kinds(KEYS[8], nil, nil, redis.call('HGET', KEYS[8], 'execution_id'),
    {{'pod', 0}}, {}, {}, ARGV[3])
  released = table.concat(done, ',')
end
if redis.call('HGET', KEYS[3], 'launched') == '1' then
  return reply({status = 'already', kind = released})
end
redis.call('HSET', KEYS[3], 'launched', '1', 'launched_at', ARGV[3])
local seat = hgetall(KEYS[4])
local execution = redis.call('HGET', KEYS[3], 'execution_id')
if seat.current == execution and redis.call('HGET', KEYS[3], 'state') == 'running' then
  redis.call('HSET', KEYS[7], execution, '0')
end
if seat.current == execution then settle_if_done(KEYS[5], KEYS[4], KEYS[3], KEYS[6], ARGV[4] == '1') end
return reply({status = 'launched', kind = released})
