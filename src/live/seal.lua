-- Writes the source's value of one key on the target, once. The first call for a key
-- writes it and sets the key's field in its slot's moved-fence, in one step; every later
-- call (a mover whose claim was taken over, a retry, a duplicate) finds the field and
-- writes nothing, so no value read before the move can land over a write made after it.
-- Prepended (see claim.rs): restore_rule and raise_rule, the offline copy's scripts.
-- KEYS[1]: the moved-fence (a hash); KEYS[2]: the target key; KEYS[3] (optional): its index.
-- ARGV[1]: 'restore'; 'raise' (a counter); 'absent' (the source key expired: delete the
-- target's copy); 'leave' (a counter that expired: a fence is never lowered).
-- ARGV[2]: TTL in ms (0: persistent); ARGV[3]: the DUMP payload, or the counter's value;
-- ARGV[4]: the index member.
-- Returns 1 when this call wrote the target, 0 when the key had already been moved (its
-- field, or the whole slot's once the walk's end compacted the fence: see compact.lua).
if redis.call('HEXISTS', KEYS[1], KEYS[2]) == 1
  or redis.call('HEXISTS', KEYS[1], 'slotbridge:live:all') == 1 then
  return 0
end
local rule_keys = {KEYS[2], KEYS[3]}
if ARGV[1] == 'restore' then
  restore_rule(rule_keys, {ARGV[2], ARGV[3], 'replace', ARGV[4]})
elseif ARGV[1] == 'raise' then
  local raised = raise_rule(rule_keys, {ARGV[3], ARGV[2]})
  if type(raised) == 'table' and raised.err then
    return raised
  end
elseif ARGV[1] == 'absent' then
  redis.call('DEL', KEYS[2])
  if KEYS[3] then
    redis.call('ZREM', KEYS[3], ARGV[4])
  end
elseif ARGV[1] ~= 'leave' then
  return redis.error_reply('ERR unknown seal kind ' .. tostring(ARGV[1]))
end
-- Last: a failed restore (a bad payload raises) leaves the key unmoved, to be redone.
redis.call('HSET', KEYS[1], KEYS[2], '1')
return 1
