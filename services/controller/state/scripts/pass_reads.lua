-- What a listing pass reads before it lists the runtime, in one call; it writes nothing.
-- KEYS[1] expected, KEYS[2] attention, KEYS[3] the recorded decision requests, KEYS[4] the
-- swarm's config (whether the swarm is known at all).
-- ARGV[1..4] the key prefixes of seats, fences, decisions and attempts (a record's key is its
-- prefix and its name or execution id), ARGV[5] JSON list of the seats not to read (the fast
-- path has them), ARGV[6] JSON list of a fence's release fields.
-- Every key named from the records carries the swarm's hash tag, as KEYS do: on a Redis
-- Cluster they lie in the slot of KEYS[1], which is what the cluster checks.
-- Returns {expected as HGETALL, attention's members, the seats only awaiting their
-- replacement's report (names), the other seats read (each as HGETALL), the requests as
-- HGETALL, 1 when the swarm's config exists else 0}. A seat only awaits
-- that report when it is replacing, its fenced attempt's every release is recorded and its
-- decision accepted, and its current attempt (the replacement) runs and was launched: the pass
-- has nothing to do for it.
local seat_prefix, fence_prefix, decision_prefix, execution_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local skip = {}
for _, name in ipairs(cjson.decode(ARGV[5])) do skip[name] = true end
local releases = cjson.decode(ARGV[6])

local function awaiting_outcome(seat)
  local fenced = seat.fenced_execution
  if seat.state ~= 'replacing' or not fenced or fenced == '' then return false end
  for _, value in ipairs(redis.call('HMGET', fence_prefix .. fenced, unpack(releases))) do
    if not value then return false end
  end
  if redis.call('HGET', decision_prefix .. fenced, 'state') ~= 'accepted' then return false end
  local current = redis.call('HMGET', execution_prefix .. seat.current, 'state', 'launched')
  return current[1] == 'running' and current[2] == '1'
end

local members = redis.call('SMEMBERS', KEYS[2])
local idle, seats = {}, {}
for _, name in ipairs(members) do
  if not skip[name] then
    local flat = redis.call('HGETALL', seat_prefix .. name)
    if #flat > 0 then
      local seat = {}
      for i = 1, #flat, 2 do seat[flat[i]] = flat[i + 1] end
      if awaiting_outcome(seat) then idle[#idle + 1] = name else seats[#seats + 1] = flat end
    end
  end
end
return {
  redis.call('HGETALL', KEYS[1]), members, idle, seats, redis.call('HGETALL', KEYS[3]),
  redis.call('EXISTS', KEYS[4]),
}
