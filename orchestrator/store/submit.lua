-- Write a new job, queued, in one step: never a half-written job.
--
-- KEYS[1] submit counter   KEYS[2] job hash    KEYS[3] all jobs zset   KEYS[4] class queue
-- KEYS[5] event stream     KEYS[6] name set        KEYS[7] queue version counter
-- ARGV[1] id  ARGV[2] name  ARGV[3] team  ARGV[4] class  ARGV[5] spec (JSON)  ARGV[6] gpus
-- ARGV[7] submitted by ("" if unknown)  ARGV[8] event stream cap (approximate MAXLEN)
-- ARGV[9] fewest GPUs  ARGV[10] most GPUs (an elastic job's range)
-- ARGV[11] deadline, seconds after submission ("" if none)
-- ARGV[12] start-wait target, seconds after submission ("" if none)
-- ARGV[13] the wake channel: the new job's id is published on it, so the scheduler starts a
--          round now instead of at its next polling interval (a channel, not a key)
-- ARGV[14] GPU memory each GPU must have, GB ("" if any will do)
-- ARGV[15] the ids of the jobs it starts after, comma-separated ("" if none)
-- ARGV[16] seconds of work on its requested GPUs, estimated from its spec and profile ("" if
--          unknown): its remaining work until a run measures it
-- ARGV[17] the GPU kinds it may run on, space-separated ("" if any)
-- ARGV[18] the GPU kinds it must not run on, space-separated ("" if none)
-- ARGV[19] an interactive job's latency ceiling, "PERCENTILE MS" ("" if none)
--
-- Returns {"exists"} when the id is taken (the caller draws another), else {"ok", job hash}.

if redis.call("EXISTS", KEYS[2]) == 1 then
  return {"exists"}
end

local seq = redis.call("INCR", KEYS[1])
local t = redis.call("TIME")
local ts = t[1] .. "." .. string.format("%06d", tonumber(t[2]))
local id = ARGV[1]

redis.call("HSET", KEYS[2],
  "id", id, "name", ARGV[2], "team", ARGV[3], "class", ARGV[4], "state", "queued",
  "spec", ARGV[5], "submitted_at", ts, "updated_at", ts, "seq", seq, "gpus", ARGV[6],
  "attempts", 0, "message", "", "by", ARGV[7], "gpus_min", ARGV[9], "gpus_max", ARGV[10],
  "deadline_s", ARGV[11], "wait_target_s", ARGV[12], "gpu_memory_gb", ARGV[14],
  "after", ARGV[15], "remaining_s", ARGV[16], "gpu_kinds", ARGV[17],
  "exclude_gpu_kinds", ARGV[18], "latency_ceiling", ARGV[19])
redis.call("ZADD", KEYS[3], seq, id)
redis.call("ZADD", KEYS[4], seq, id)
redis.call("INCR", KEYS[7])
redis.call("SADD", KEYS[6], id)

local by = ""
if ARGV[7] ~= "" then
  by = "by " .. ARGV[7]
end
redis.call("XADD", KEYS[5], "MAXLEN", "~", ARGV[8], "*",
  "event", "submitted", "ts", ts, "message", by, "from", "")
redis.call("XADD", KEYS[5], "MAXLEN", "~", ARGV[8], "*",
  "event", "queued", "ts", ts, "message", "", "from", "submitted")
redis.call("PUBLISH", ARGV[13], id)

return {"ok", redis.call("HGETALL", KEYS[2])}
