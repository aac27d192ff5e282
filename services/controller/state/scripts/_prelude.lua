-- Prepended by scripting.py to every mutating script.
-- KEYS[1] is the swarm's lease key and KEYS[2] its epoch key; ARGV[1] is this controller's
-- holder id and ARGV[2] its epoch. A controller that lost its lease changes nothing: when the
-- lease no longer names this holder and epoch the script writes nothing and returns lease_lost.
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 'lease_lost'
end
local EPOCH = ARGV[2]

local function hgetall(key)
  local flat = redis.call('HGETALL', key)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local function hset_map(key, map)
  local flat = {}
  for k, v in pairs(map) do
    flat[#flat + 1] = k
    flat[#flat + 1] = tostring(v)
  end
  if #flat > 0 then redis.call('HSET', key, unpack(flat)) end
end

local function reply(t)
  return cjson.encode(t)
end

-- Provider account slots: the slots hash (execution -> account) says who holds one, and the
-- used hash (account -> count) beside it keeps the count, so taking or ending a slot never
-- reads every holder. State written before the count existed gets it rebuilt once, here.
local function slot_counts(slots_key, used_key)
  if redis.call('EXISTS', used_key) == 0 and redis.call('HLEN', slots_key) > 0 then
    local counts = {}
    for _, account in pairs(hgetall(slots_key)) do counts[account] = (counts[account] or 0) + 1 end
    hset_map(used_key, counts)
  end
end

-- Capacities, slots in use, and account names in order.
local function slot_usage(accounts_key, slots_key, used_key)
  slot_counts(slots_key, used_key)
  local caps = hgetall(accounts_key)
  local used = {}
  for account, n in pairs(hgetall(used_key)) do used[account] = tonumber(n) end
  local names = {}
  for name in pairs(caps) do names[#names + 1] = name end
  table.sort(names)
  return {caps = caps, used = used, names = names}
end

-- Take a slot of the first provider account (by name) with one free; nil when none is.
local function take_slot(usage, slots_key, used_key, execution)
  for _, name in ipairs(usage.names) do
    if (usage.used[name] or 0) < tonumber(usage.caps[name]) then
      usage.used[name] = (usage.used[name] or 0) + 1
      redis.call('HSET', slots_key, execution, name)
      redis.call('HINCRBY', used_key, name, 1)
      return name
    end
  end
  return nil
end

-- End the slot an execution holds, if any.
local function end_slot(slots_key, used_key, execution)
  slot_counts(slots_key, used_key)
  local account = redis.call('HGET', slots_key, execution)
  if account then
    redis.call('HDEL', slots_key, execution)
    redis.call('HINCRBY', used_key, account, -1)
  end
end

-- What each release kind revokes, from the fenced attempt's record: its worker credential
-- (launch_grant), kept until the credential could no longer pass a check, and its store grants
-- (store_grants), each kept as long as any copy minted before the fence could pass one; the
-- other kinds revoke no token. `revoke`: the revocation key prefix (a token's key is the prefix
-- and its id), now (seconds), how long past its issue a credential's revocation is kept, how
-- long a grant's is. Returns what release_kinds takes: {kind, how many keys are its own} per
-- kind, and the keys and their TTLs in that order.
local function revocations(kinds, execution, revoke)
  local entries, revoke_keys, ttls = {}, {}, {}
  local prefix, now = revoke[1], tonumber(revoke[2])
  for _, kind in ipairs(kinds) do
    local count = 0
    local function add(token, ttl)
      if token and token ~= '' then
        revoke_keys[#revoke_keys + 1] = prefix .. token
        ttls[#ttls + 1] = ttl
        count = count + 1
      end
    end
    if kind == 'launch_grant' then
      add(execution.credential_id,
        math.max(1, tonumber(execution.credential_issued_at) + tonumber(revoke[3]) - now))
    elseif kind == 'store_grants' then
      add(execution.capture_grant_id, tonumber(revoke[4]))
      add(execution.restore_grant_id, tonumber(revoke[4]))
    end
    entries[#entries + 1] = {kind, count}
  end
  return entries, revoke_keys, ttls
end

-- Do and record in the fence each release of a fenced attempt that is not recorded yet.
-- kinds: a list of {kind, how many of `revoke_keys` are its own}, in key order; revoke_keys and
-- ttls: the revocation keys to set and their TTLs in seconds. Returns the kinds done and the
-- record written for each.
local function release_kinds(fence_key, slots_key, used_key, execution, kinds, revoke_keys,
                             ttls, at)
  local record = cjson.encode({released_at = at, controller_epoch = tonumber(EPOCH)})
  local done, index = {}, 1
  for _, entry in ipairs(kinds) do
    local kind, count = entry[1], entry[2]
    local field = 'release:' .. kind
    if redis.call('HEXISTS', fence_key, field) == 0 then
      for i = index, index + count - 1 do
        redis.call('SET', revoke_keys[i], '1', 'EX', ttls[i])
      end
      if kind == 'account_slot' then end_slot(slots_key, used_key, execution) end
      redis.call('HSET', fence_key, field, record)
      done[#done + 1] = kind
    end
    index = index + count
  end
  return done, record
end

-- Take a seat off the pass's attention set when nothing is left to do: it is running, its
-- current attempt was launched, and its latest fence (if it has one) has released its Pod.
-- True when it did.
local function settle_if_done(attention_key, seat_key, execution_key, fence_key, fenced)
  local seat = hgetall(seat_key)
  if seat.state ~= 'running' or redis.call('HGET', execution_key, 'launched') ~= '1' then
    return false
  end
  if fenced and redis.call('HEXISTS', fence_key, 'release:pod') == 0 then return false end
  redis.call('SREM', attention_key, seat.seat)
  return true
end

-- One telemetry event, written by the same script as its transition; returned for the log line.
local function event(stream, kind, swarm, seat, execution, expected, observed, detail, at)
  local id = redis.call('XADD', stream, 'MAXLEN', '~', '10000', '*',
    'kind', kind, 'swarm', swarm, 'seat', seat, 'execution_id', execution,
    'expected_generation', tostring(expected), 'observed_generation', tostring(observed),
    'controller_epoch', EPOCH, 'detail', detail, 'at', at)
  return {id = id, kind = kind, swarm = swarm, seat = seat, execution_id = execution,
          expected_generation = tonumber(expected) or 0, observed_generation = tonumber(observed) or 0,
          controller_epoch = tonumber(EPOCH), detail = detail, at = at}
end
