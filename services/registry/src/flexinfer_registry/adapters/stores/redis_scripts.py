"""Lua scripts of the Redis stores: each runs atomically, so readers (HGETALL) see a hash
either before or after a write, never half of one.

Timestamps are fixed-width RFC 3339 strings (see ``rfc3339``), so ``<`` on them is time order.
"""

from __future__ import annotations

# KEYS[1] model hash; ARGV provider, now, stale cut-off ("" = never reclaim a live claim).
# The first claim is the seed's HSETNX on status; a retry (ERROR) or a takeover of a
# DOWNLOADING claim whose owner stopped heart-beating overwrites it, keeping created_at.
CLAIM_MODEL = """
local key = KEYS[1]
if redis.call('HSETNX', key, 'status', 'DOWNLOADING') == 0 then
  local status = redis.call('HGET', key, 'status')
  local claimable = status == 'ERROR'
  if status == 'DOWNLOADING' and ARGV[3] ~= '' then
    local seen = redis.call('HGET', key, 'updated_at') or redis.call('HGET', key, 'last_used_at')
    claimable = (not seen) or seen < ARGV[3]
  end
  if not claimable then
    return 0
  end
  redis.call('HSET', key, 'status', 'DOWNLOADING')
end
redis.call('HSET', key, 'provider', ARGV[1], 'last_used_at', ARGV[2], 'updated_at', ARGV[2])
redis.call('HSETNX', key, 'created_at', ARGV[2])
redis.call('HDEL', key, 'message')
return 1
"""

# KEYS[1] model hash; ARGV status, provider, now, has_message ("1"/"0"), message.
SET_MODEL_STATUS = """
local key = KEYS[1]
redis.call('HSET', key, 'status', ARGV[1], 'provider', ARGV[2],
           'last_used_at', ARGV[3], 'updated_at', ARGV[3])
redis.call('HSETNX', key, 'created_at', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', key, 'message', ARGV[5])
else
  redis.call('HDEL', key, 'message')
end
return 1
"""

# KEYS[1] model hash; ARGV now. Update-only: a touch never creates a record.
TOUCH_MODEL = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'last_used_at', ARGV[1])
return 1
"""

# KEYS[1] model hash; ARGV status, earliest and latest updated_at. Compare-and-delete: only
# a record still in the state the caller judged is removed (records without updated_at,
# as ModelExpress writes them, are judged by last_used_at, as the reader does).
DELETE_MODEL_IF = """
local status = redis.call('HGET', KEYS[1], 'status')
local seen = redis.call('HGET', KEYS[1], 'updated_at')
seen = seen or redis.call('HGET', KEYS[1], 'last_used_at')
if status ~= ARGV[1] or (not seen) or seen < ARGV[2] or seen > ARGV[3] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS[1] source index, KEYS[2] worker hash; ARGV identity JSON, worker_id, then field/value
# pairs of the worker hash. Replaces the worker wholly (DEL first: no stale optional fields).
PUBLISH_SOURCE = """
redis.call('HSET', KEYS[1], '__attributes__', ARGV[1], ARGV[2], '1')
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
return 1
"""

# KEYS[1] worker hash; ARGV status, now, source_load ("" = keep the stored one).
UPDATE_SOURCE_STATUS = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated_at', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'source_load', ARGV[3])
end
return 1
"""

# KEYS[1] worker hash; ARGV cut-off. Re-checks under atomicity what the scan saw, so a
# worker that heart-beat after the scan is never marked.
MARK_SOURCE_STALE = """
local status = redis.call('HGET', KEYS[1], 'status')
local seen = redis.call('HGET', KEYS[1], 'updated_at')
if (not status) or status == 'STALE' or (not seen) or seen >= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'STALE')
return 1
"""

# KEYS[1] worker hash, KEYS[2] source index; ARGV cut-off, worker_id. Deletes an old STALE
# worker and its presence field; drops the index once no worker is left in it.
GC_SOURCE = """
local status = redis.call('HGET', KEYS[1], 'status')
local seen = redis.call('HGET', KEYS[1], 'updated_at')
if status ~= 'STALE' or (not seen) or seen >= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[2])
if redis.call('HLEN', KEYS[2]) <= 1 then
  redis.call('DEL', KEYS[2])
end
return 1
"""
