-- Compacts one slot's moved-fence at the end of a live migration: its field per moved key
-- gives way to the one field 'slotbridge:live:all', which the seal reads as "every key of this
-- slot is moved". Run only once a whole pass found the source empty: then no key's first seal
-- can still come (a key stays on the source until after its seal), so refusing every later
-- seal refuses only stale ones, as the per-key fields did. What is left is one small hash per
-- slot that had a move, instead of a field per key for as long as the target lives.
-- KEYS[1]: the slot's moved-fence. Returns 1 when the slot had one, 0 when not.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'slotbridge:live:all', '1')
return 1
