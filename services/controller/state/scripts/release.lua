-- Releases of a fenced attempt, recorded in its fence so none happens twice. All the kinds of
-- one call are done and recorded together (the authority releases are one call: a crash leaves
-- all of them recorded or none). Revocation keys are written here, in the same script as the
-- record; a kind already recorded is skipped with its revocations.
-- KEYS[3] fence, [4] slots, [5] slots used per account, [6..] revocation keys.
-- ARGV[3] JSON list of [kind, how many of the revocation keys are its own] in key order,
--   [4] at, [5] execution id, [6..] TTL in seconds of each revocation key.
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local revoke_keys, ttls = {}, {}
for i = 6, #KEYS do
  revoke_keys[#revoke_keys + 1] = KEYS[i]
  ttls[#ttls + 1] = ARGV[i]
end
local done = release_kinds(KEYS[3], KEYS[4], KEYS[5], ARGV[5], cjson.decode(ARGV[3]),
  revoke_keys, ttls, ARGV[4])
if #done == 0 then return reply({status = 'already'}) end
return reply({status = 'released', kind = table.concat(done, ','), execution = ARGV[5]})
