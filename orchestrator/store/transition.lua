-- Move one job to a new state, atomically (the store's only state writer).
--
-- KEYS[1]  the job hash            KEYS[2]  the job's event stream
-- KEYS[3]  the queue version counter (bumped whenever a queue's membership changes)
-- ARGV[1]  target state
-- ARGV[2]  states the target may be entered from, space-separated (from states.py, so the
--          transition table lives in Python only)
-- ARGV[3]  states the caller expects the job to be in, space-separated; "*" for any
-- ARGV[4]  message                 ARGV[5]  queue key prefix (queue key = prefix .. class)
-- ARGV[6]  event stream cap (approximate MAXLEN)
-- KEYS[4]  the scheduler lease     ARGV[7]  the lease holder the writer speaks for ("": a
--          user's write, not fenced: a scheduler's write is refused unless it holds the lease)
-- ARGV[8..] extra field/value pairs to set on the job hash
--
-- Returns {"missing"}, {"fenced", holder}, {"illegal", current}, or
-- {"ok", previous, {job hash, flattened}}.

local function has(list, word)
  return string.find(" " .. list .. " ", " " .. word .. " ", 1, true) ~= nil
end

if ARGV[7] ~= "" then
  local holder = redis.call("GET", KEYS[4])
  if holder ~= ARGV[7] then
    return {"fenced", holder or ""}
  end
end

local current = redis.call("HGET", KEYS[1], "state")
if not current then
  return {"missing"}
end
local target = ARGV[1]
if (ARGV[3] ~= "*" and not has(ARGV[3], current)) or not has(ARGV[2], current) then
  return {"illegal", current}
end

-- Server time: one clock for every client, whichever host it runs on.
local t = redis.call("TIME")
local ts = t[1] .. "." .. string.format("%06d", tonumber(t[2]))

local fields = {"state", target, "updated_at", ts, "message", ARGV[4]}
for i = 8, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call("HSET", KEYS[1], unpack(fields))
redis.call("XADD", KEYS[2], "MAXLEN", "~", ARGV[6], "*",
  "event", target, "ts", ts, "message", ARGV[4], "from", current)

-- The per-class queue mirrors the "queued" state: scored by submit sequence, so FIFO.
local job = redis.call("HMGET", KEYS[1], "id", "class", "seq")
local queue = ARGV[5] .. job[2]
if target == "queued" then
  redis.call("ZADD", queue, job[3], job[1])
  redis.call("INCR", KEYS[3])
elseif current == "queued" then
  redis.call("ZREM", queue, job[1])
  redis.call("INCR", KEYS[3])
end

return {"ok", current, redis.call("HGETALL", KEYS[1])}
