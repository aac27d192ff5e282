-- Take a seat off the pass's attention set once nothing is left to do: it is running, its
-- current attempt was launched, and its latest fence (if any) has released its Pod. Checked
-- here, atomically, so a fence that lands meanwhile keeps the seat on the set.
-- KEYS[3] attention, [4] seat, [5] current execution, [6] latest fence (any key when none).
-- ARGV[3] '1' when the seat has a fence.
if not settle_if_done(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3] == '1') then
  return reply({status = 'busy'})
end
return reply({status = 'settled'})
