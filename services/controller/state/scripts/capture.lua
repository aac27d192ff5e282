-- A running attempt reports its native session id and archive watermark. Only the seat's
-- current, unfenced attempt with its own credential may; a fenced one stores nothing.
-- A final capture (the sidecar's last, once the worker stopped) is marked on the attempt: a fence
-- after it names no lost tail.
-- KEYS[3] seat, [4] execution.
-- ARGV[3] execution id, [4] credential id, [5] generation, [6] session id or '',
--   [7] archive watermark or '', [8] checkpoint id or '', [9] at, [10] '1' when final.
local execution = hgetall(KEYS[4])
local seat = hgetall(KEYS[3])
if execution.credential_id ~= ARGV[4] or execution.generation ~= ARGV[5]
    or execution.state ~= 'running' or seat.current ~= ARGV[3] then
  return reply({status = 'forbidden'})
end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[4], 'native_session_id', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[4], 'archive_watermark', ARGV[7]) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[4], 'captured_checkpoint_id', ARGV[8]) end
redis.call('HSET', KEYS[4], 'captured_at', ARGV[9])
if ARGV[10] == '1' then redis.call('HSET', KEYS[4], 'capture_final', '1') end
return reply({status = 'captured'})
