-- What the runtime's list showed of expected attempts: one listed again after a pass without
-- it counts from zero again (the passes must be consecutive), and one whose worker finished
-- (exited 0) is expected no longer, unless it holds a restore refusal (see absent.lua).
-- KEYS[3] expected, [4..] the refusal key of each finished attempt, in ARGV[4]'s order.
-- ARGV[3] JSON list of attempts listed again, [4] JSON list of finished attempts.
for _, execution in ipairs(cjson.decode(ARGV[3])) do
  if redis.call('HEXISTS', KEYS[3], execution) == 1 then
    redis.call('HSET', KEYS[3], execution, '0')
  end
end
for i, execution in ipairs(cjson.decode(ARGV[4])) do
  if redis.call('EXISTS', KEYS[3 + i]) == 0 then redis.call('HDEL', KEYS[3], execution) end
end
return reply({status = 'recorded'})
