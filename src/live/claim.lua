-- Claims the moves of source keys for one mover, and reads each key in the same step: for
-- each key on its own, as if run one after another (one call saves round trips only).
-- The source's clock alone judges deadlines, so movers on different hosts agree.
-- KEYS: pairs of a source key and its claim record (a hash: token, deadline).
-- ARGV[1]: the mover's token; ARGV[2]: the lease in ms; ARGV[2 + i]: for the i-th key,
-- 'dump', or 'get' for a counter (its number travels, so the target can keep the higher).
-- Returns one answer per key: {'busy', ms left of another mover's live claim}; {'gone'}
-- when there is neither key nor claim (nothing to move: the target is authoritative);
-- {'absent'} when a claim was taken over but the key has expired meanwhile;
-- {'claimed', pttl, payload}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local deadline_text = string.format('%.0f', now + tonumber(ARGV[2]))

local function claim(key, record, how)
  local holder = redis.call('HMGET', record, 'token', 'deadline')
  if holder[1] and holder[1] ~= ARGV[1] then
    local deadline = tonumber(holder[2]) or 0
    if deadline > now then
      return {'busy', deadline - now}
    end
  end
  local exists = redis.call('EXISTS', key) == 1
  if not exists and not holder[1] then
    return {'gone'}
  end
  local pttl, payload
  if exists then
    pttl = redis.call('PTTL', key)
    if how == 'get' then
      payload = redis.call('GET', key)
    else
      payload = redis.call('DUMP', key)
    end
  end
  redis.call('HSET', record, 'token', ARGV[1], 'deadline', deadline_text)
  if not exists then
    return {'absent'}
  end
  return {'claimed', pttl, payload}
end

local answers = {}
for i = 1, #KEYS / 2 do
  answers[i] = claim(KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 + i])
end
return answers
