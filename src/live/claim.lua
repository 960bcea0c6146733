-- Claims the move of one source key for one mover, and reads the key in the same step.
-- The source's clock alone judges deadlines, so movers on different hosts agree.
-- KEYS[1]: the source key; KEYS[2]: its claim record (a hash: token, deadline).
-- ARGV[1]: the mover's token; ARGV[2]: the lease in ms; ARGV[3]: 'dump', or 'get' for a
-- counter (its number travels, so the target can keep the higher of two).
-- Returns {'busy', ms left of another mover's live claim}; {'gone'} when there is neither
-- key nor claim (nothing to move: the target is authoritative); {'absent'} when a claim was
-- taken over but the key has expired meanwhile; {'claimed', pttl, payload}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local holder = redis.call('HMGET', KEYS[2], 'token', 'deadline')
if holder[1] and holder[1] ~= ARGV[1] then
  local deadline = tonumber(holder[2]) or 0
  if deadline > now then
    return {'busy', deadline - now}
  end
end
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and not holder[1] then
  return {'gone'}
end
local pttl, payload
if exists then
  pttl = redis.call('PTTL', KEYS[1])
  if ARGV[3] == 'get' then
    payload = redis.call('GET', KEYS[1])
  else
    payload = redis.call('DUMP', KEYS[1])
  end
end
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'deadline',
  string.format('%.0f', now + tonumber(ARGV[2])))
if not exists then
  return {'absent'}
end
return {'claimed', pttl, payload}
