-- Ends moves on the source once the target holds their keys: for each key on its own,
-- deletes the source key and the claim, only while the claim is still this mover's (else
-- its successor finishes).
-- KEYS: pairs of a source key and its claim record. ARGV[1]: the mover's token.
-- Returns one answer per key: 1 when released, 0 when the claim is another mover's (or
-- already gone).
local answers = {}
for i = 1, #KEYS / 2 do
  local key, record = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('HGET', record, 'token') ~= ARGV[1] then
    answers[i] = 0
  else
    redis.call('DEL', key, record)
    answers[i] = 1
  end
end
return answers
