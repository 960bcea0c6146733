-- Reads one index of an index-backed family for a listing (cluster:v1 layout).
--
-- Prunes the entries whose score (the record's expiry, Unix ms) is in the past, by the
-- server's clock (the clock that expires the records), then returns the members left.
-- A record expiring at `now` exactly is still alive (Redis expires when now > at).
--
-- KEYS[1]: the index (a sorted set). No ARGV. Reply: the members, lowest score first.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
return redis.call('ZRANGE', KEYS[1], 0, -1)
