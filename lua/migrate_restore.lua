-- Restores one DUMPed key and keeps its index entry, atomically (both keys share a slot).
-- KEYS[1]: the target key; KEYS[2] (optional): its index (sorted set).
-- ARGV[1]: TTL in ms (0: persistent); ARGV[2]: DUMP payload; ARGV[3]: "keep" or "replace";
-- ARGV[4]: the index member.
-- Returns 0 when an existing target key was kept, 1 when created, 2 when replaced.
local status = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RESTORE', KEYS[1], ARGV[1], ARGV[2])
  status = 1
elseif ARGV[3] == 'replace' then
  redis.call('RESTORE', KEYS[1], ARGV[1], ARGV[2], 'REPLACE')
  status = 2
end
-- The index score is the record's expiry in Unix ms, +inf when it has none: the same
-- entry the proxy's index upkeep writes, also for a target key that was kept.
if KEYS[2] then
  local at = redis.call('PEXPIRETIME', KEYS[1])
  if at >= 0 then
    redis.call('ZADD', KEYS[2], at, ARGV[4])
  elseif at == -1 then
    redis.call('ZADD', KEYS[2], '+inf', ARGV[4])
  end
end
return status
