-- Reads one key's value in a form that compares across servers, without changing anything:
-- the same value gives the same digest whatever each server's encoding (listpack or
-- hashtable), hash seed (a set's or a hash's order) or RDB version, which a DUMP payload
-- does not. Run on the source and on the target between a move's seal and its finish.
-- KEYS[1]: the key. ARGV[1]: the most elements read, ARGV[2]: the most bytes of a string
-- read; a larger value is not read, so the script stays short on a busy server.
-- Returns {'none'} when the key does not exist, {'large', type} past the limit, else
-- {type, sha1 of the value's elements, each as its length, ':' and its bytes, in an order
-- both sides agree on, pttl}. A stream is its entries (consumer groups are not read).
local key, limit = KEYS[1], tonumber(ARGV[1])
local kind = redis.call('TYPE', key)['ok']
if kind == 'none' then
  return {'none'}
elseif kind == 'string' then
  limit = tonumber(ARGV[2])
end
local sizes = {string = 'STRLEN', list = 'LLEN', set = 'SCARD', zset = 'ZCARD',
               hash = 'HLEN', stream = 'XLEN'}
local size_of = sizes[kind]
if not size_of or redis.call(size_of, key) > limit then
  return {'large', kind}
end
-- Byte order: Lua's own `<` follows the server's locale, which two servers may not share.
local function before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end
local parts = {}
local function add(item)
  parts[#parts + 1] = #item .. ':' .. item
end
if kind == 'string' then
  add(redis.call('GET', key))
elseif kind == 'list' then
  for _, item in ipairs(redis.call('LRANGE', key, 0, -1)) do add(item) end
elseif kind == 'set' then
  local members = redis.call('SMEMBERS', key)
  table.sort(members, before)
  for _, item in ipairs(members) do add(item) end
elseif kind == 'zset' then
  -- Score order, ties by member: the same on every server.
  for _, item in ipairs(redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')) do add(item) end
elseif kind == 'hash' then
  local flat = redis.call('HGETALL', key)
  local pairs_of = {}
  for i = 1, #flat, 2 do pairs_of[#pairs_of + 1] = {flat[i], flat[i + 1]} end
  table.sort(pairs_of, function(a, b) return before(a[1], b[1]) end)
  for _, pair in ipairs(pairs_of) do add(pair[1]); add(pair[2]) end
else
  for _, entry in ipairs(redis.call('XRANGE', key, '-', '+')) do
    add(entry[1])
    for _, item in ipairs(entry[2]) do add(item) end
  end
end
return {kind, redis.sha1hex(table.concat(parts)), redis.call('PTTL', key)}
