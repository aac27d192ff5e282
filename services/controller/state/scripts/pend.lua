-- The fenced attempt waits for the master or operator: its decision stays recovery_pending.
-- KEYS[3] fence, [4] decision, [5] seat, [6] events.
-- ARGV[3] execution id, [4] offer JSON or '', [5] at, [6] swarm, [7] detail JSON, [8] the
--   compatibility key (worker image tag) the offer was worked out under.
if redis.call('EXISTS', KEYS[4]) == 1 then return reply({status = 'exists'}) end
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local fence = hgetall(KEYS[3])
local decision = {execution_id = ARGV[3], state = 'recovery_pending', controller_epoch = EPOCH,
                  pending_since = ARGV[5], offer_key = ARGV[8]}
if ARGV[4] ~= '' then decision.offer = ARGV[4] end
hset_map(KEYS[4], decision)
local seat = hgetall(KEYS[5])
if seat.current == ARGV[3] then redis.call('HSET', KEYS[5], 'state', 'awaiting_decision') end
local ev = event(KEYS[6], 'recovery', ARGV[6], fence.seat, ARGV[3], fence.generation,
  seat.generation, ARGV[7], ARGV[5])
return reply({status = 'pending', events = {ev}})
