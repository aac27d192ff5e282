-- One release of a fenced attempt, recorded in its fence so it never happens twice.
-- Revocation keys are written here, in the same script as the record.
-- KEYS[3] fence, [4] slots, [5] slots used per account, [6..] revocation keys.
-- ARGV[3] kind, [4] at, [5] execution id, [6..] TTL in seconds of each revocation key.
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local field = 'release:' .. ARGV[3]
if redis.call('HEXISTS', KEYS[3], field) == 1 then return reply({status = 'already'}) end
for i = 6, #KEYS do
  redis.call('SET', KEYS[i], '1', 'EX', ARGV[i])
end
if ARGV[3] == 'account_slot' then end_slot(KEYS[4], KEYS[5], ARGV[5]) end
redis.call('HSET', KEYS[3], field,
  cjson.encode({released_at = ARGV[4], controller_epoch = tonumber(EPOCH)}))
return reply({status = 'released', kind = ARGV[3], execution = ARGV[5]})
