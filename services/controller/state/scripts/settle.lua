-- Take a seat off the pass's attention set once nothing is left to do: it is running, its
-- current attempt was launched, and its latest fence (if any) has released its Pod. Checked
-- here, atomically, so a fence that lands meanwhile keeps the seat on the set.
-- KEYS[3] attention, [4] seat, [5] current execution, [6] latest fence (any key when none).
-- ARGV[3] seat name, [4] '1' when the seat has a fence.
local seat = hgetall(KEYS[4])
if seat.state ~= 'running' or redis.call('HGET', KEYS[5], 'launched') ~= '1' then
  return reply({status = 'busy'})
end
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[6], 'release:pod') == 0 then
  return reply({status = 'busy'})
end
redis.call('SREM', KEYS[3], ARGV[3])
return reply({status = 'settled'})
