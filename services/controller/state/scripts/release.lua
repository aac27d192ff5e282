-- Releases of a fenced attempt, recorded in its fence so none happens twice. All the kinds of
-- one call are done and recorded together (the authority releases are one call: a crash leaves
-- all of them recorded or none). What each kind revokes is read from the attempt's record (see
-- revocations in the prelude) and the revocation keys are written here, in the same script as
-- the record; a kind already recorded is skipped with its revocations.
-- KEYS[3] fence, [4] slots, [5] slots used per account, [6] the fenced attempt's record.
-- ARGV[3] JSON list of the kinds, [4] at, [5] execution id, [6..9] the revocation key prefix,
--   now (seconds), how long past its issue a credential's revocation is kept, how long a
--   store grant's is.
if redis.call('EXISTS', KEYS[3]) == 0 then return reply({status = 'no_fence'}) end
local wanted = cjson.decode(ARGV[3])
local execution = hgetall(KEYS[6])
for _, kind in ipairs(wanted) do
  -- The authority releases need the attempt's record (the Pod's does not).
  if kind ~= 'pod' and next(execution) == nil then return reply({status = 'execution_missing'}) end
end
local kinds, revoke_keys, ttls = revocations(wanted, execution, {ARGV[6], ARGV[7], ARGV[8], ARGV[9]})
local done = release_kinds(KEYS[3], KEYS[4], KEYS[5], ARGV[5], kinds, revoke_keys, ttls, ARGV[4])
if #done == 0 then return reply({status = 'already'}) end
return reply({status = 'released', kind = table.concat(done, ','), execution = ARGV[5]})
