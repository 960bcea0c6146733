-- Ends a move on the source once the target holds the key: deletes the source key and
-- the claim, only while the claim is still this mover's (else its successor finishes).
-- KEYS[1]: the source key; KEYS[2]: its claim record. ARGV[1]: the mover's token.
-- Returns 1 when released, 0 when the claim is another mover's (or already gone).
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
