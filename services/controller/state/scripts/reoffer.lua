-- A pending decision's offer, worked out again under the controller's current compatibility key
-- (its worker image tag changed since the offer was recorded): checkpoints are offered only when
-- they were captured under the same compatibility key as the controller's current worker image
-- tag. Only the offer and its key change, and only while the decision is still pending.
-- KEYS[3] fence, [4] decision, [5] seat, [6] events.
-- ARGV[3] execution id, [4] offer JSON or '', [5] compatibility key, [6] at, [7] swarm,
--   [8] detail JSON.
local decision = hgetall(KEYS[4])
if decision.state ~= 'recovery_pending' then return reply({status = 'not_pending'}) end
if decision.offer_key == ARGV[5] then return reply({status = 'current'}) end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[4], 'offer', ARGV[4], 'offer_key', ARGV[5])
else
  redis.call('HDEL', KEYS[4], 'offer')
  redis.call('HSET', KEYS[4], 'offer_key', ARGV[5])
end
local fence = hgetall(KEYS[3])
local seat = hgetall(KEYS[5])
local ev = event(KEYS[6], 'recovery', ARGV[7], fence.seat, ARGV[3], fence.generation,
  seat.generation, ARGV[8], ARGV[6])
return reply({status = 'reoffered', events = {ev}})
