-- Releases of a fenced attempt, recorded in its fence so none happens twice. All the kinds of
-- one call are done and recorded together (the authority releases are one call: a crash leaves
-- all of them recorded or none). Revocation keys are written here, in the same script as the
-- record; a kind already recorded is skipped with its revocations.
-- KEYS[3] fence, [4] slots, [5] slots used per account, [6..] revocation keys.
-- ARGV[3] JSON list of [kind, how many of the revocation keys are its own] in key order,
--   [4] at, [5] execution id, [6..] TTL in seconds of each revocation key.
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local record = cjson.encode({released_at = ARGV[4], controller_epoch = tonumber(EPOCH)})
local done, index = {}, 6
for _, entry in ipairs(cjson.decode(ARGV[3])) do
  local kind, count = entry[1], entry[2]
  local field = 'release:' .. kind
  if redis.call('HEXISTS', KEYS[3], field) == 0 then
    for i = index, index + count - 1 do
      redis.call('SET', KEYS[i], '1', 'EX', ARGV[i])
    end
    if kind == 'account_slot' then end_slot(KEYS[4], KEYS[5], ARGV[5]) end
    redis.call('HSET', KEYS[3], field, record)
    done[#done + 1] = kind
  end
  index = index + count
end
if #done == 0 then return reply({status = 'already'}) end
return reply({status = 'released', kind = table.concat(done, ','), execution = ARGV[5]})
