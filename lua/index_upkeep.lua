-- Index upkeep for index-backed key families (cluster:v1 layout).
--
-- Runs one command (optional) and then brings the index entry of each listed record in
-- line with the record: the entry's score is the record's expiry (PEXPIRETIME, Unix ms),
-- `+inf` when it has none, and the entry is removed when the record no longer exists.
-- Everything runs in one script, so the command and its index upkeep are atomic. All keys
-- share one hash slot: an index shares its record's hash tag by construction.
--
-- KEYS: index_1, record_1, ..., index_n, record_n, then any other key the command
--       touches (declared so that the cluster routes and checks them; not used here).
-- ARGV[1]: n, the number of (index, record) pairs.
-- ARGV[2]: "3" to run the command under RESP3 (the caller's protocol), else "2".
-- ARGV[3 .. n+2]: the index member of each record.
-- ARGV[n+3 ..]: the command and its arguments; none to only refresh the entries.
--
-- Reply: the command's reply as the command gave it (errors included, unchanged), or
-- the number of entries refreshed when there is no command.

local n = tonumber(ARGV[1])
local first_arg = n + 3
local reply = n
if #ARGV >= first_arg then
    if ARGV[2] == '3' then
        redis.setresp(3)
    end
    -- pcall: an error reply goes back to the client as the command gave it, after the
    -- upkeep below (harmless when the command changed nothing).
    reply = redis.pcall(unpack(ARGV, first_arg))
end
for i = 1, n do
    local index = KEYS[2 * i - 1]
    local record = KEYS[2 * i]
    local member = ARGV[2 + i]
    if redis.call('EXISTS', record) == 1 then
        local at = redis.call('PEXPIRETIME', record)
        if at < 0 then
            redis.call('ZADD', index, '+inf', member)
        else
            redis.call('ZADD', index, at, member)
        end
    else
        redis.call('ZREM', index, member)
    end
end
return reply
