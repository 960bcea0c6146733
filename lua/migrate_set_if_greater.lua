-- Raises a counter (lock fence, leadership term) to a value, never lowers it.
-- KEYS[1]: the target counter; ARGV[1]: the source value (an integer);
-- ARGV[2]: TTL in ms to give a newly created counter (0: persistent).
-- Returns 0 when the target was already as high, 1 when created, 2 when raised.
local wanted = tonumber(ARGV[1])
if not wanted then
  return redis.error_reply('ERR source counter is not a number')
end
local current = redis.call('GET', KEYS[1])
if current then
  local have = tonumber(current)
  if not have then
    return redis.error_reply('ERR target counter is not a number')
  end
  if have >= wanted then
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
  return 2
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
