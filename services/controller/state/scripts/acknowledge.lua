-- Acknowledge a write as durable (see durable.py), run on one connection to the master of the
-- write's slot just before WAIT (or WAITAOF) on the same connection. Not under the lease: it
-- changes no recovery state. First it checks that what the write left is on this master (a
-- failover between the write and this script may have lost it, or moved the slot); then it
-- bumps the anchor, so that this connection's last write offset covers every earlier write to
-- this master, whichever connection made it: replication offsets only grow.
-- KEYS[1] the anchor (a counter in the write's slot); KEYS[2..] the facts' keys, in order.
-- ARGV[1] the facts as JSON, one per key after the anchor: {read, arg, check, value}, where
--   read is GET, HGET (field arg), HLEN, SISMEMBER (member arg) or XRANGE (the stream entry
--   arg exists), and check is present, absent or equals (value).
-- Returns 0 and writes nothing when a fact does not hold, else 1.
local facts = cjson.decode(ARGV[1])
for i, fact in ipairs(facts) do
  local key, got = KEYS[i + 1], false
  if fact.read == 'GET' then
    got = redis.call('GET', key)
  elseif fact.read == 'HGET' then
    got = redis.call('HGET', key, fact.arg)
  elseif fact.read == 'SISMEMBER' then
    got = redis.call('SISMEMBER', key, fact.arg) == 1 and fact.arg
  elseif fact.read == 'XRANGE' then
    got = #redis.call('XRANGE', key, fact.arg, fact.arg) > 0 and fact.arg
  elseif fact.read == 'HLEN' then
    got = tostring(redis.call('HLEN', key))
  else
    return redis.error_reply('unknown read ' .. tostring(fact.read))
  end
  local holds
  if fact.check == 'absent' then
    holds = not got
  elseif fact.check == 'present' then
    holds = got and true or false
  else
    holds = got == fact.value
  end
  if not holds then return 0 end
end
redis.call('INCR', KEYS[1])
return 1
