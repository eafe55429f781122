-- Replays a pre-signed request set (see bench/signing.py) through wrk.
--
-- usage: wrk -t T -c C -d D -s replay.lua http://127.0.0.1:PORT -- <set dir> <T> [count]
--
-- Thread k of T takes records k, k+T, k+2T, ... so no two threads send the
-- same event id. A thread that runs out of records starts over and counts a
-- wrap (the router then sees duplicates); the harness sizes sets so that
-- this does not happen and reports the wraps if it does. With "count" as
-- the third argument, a response() hook counts statuses (costs wrk CPU:
-- used only where the status mix is the result, e.g. 429s under a flood).
-- With "once" in that argument ("once" or "count,once"), a thread stops
-- when its slice is used up instead of wrapping: "send exactly N events"
-- (the run's -d is then only an upper bound). wrk's main thread still
-- sleeps for -d, so each stopped thread drops a marker file named by the
-- fourth argument plus its id; the harness interrupts wrk (SIGINT makes it
-- print its results) once every thread has dropped one.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  local dir = args[1]
  local nthreads = tonumber(args[2])
  local set = dofile(dir .. "/requests.lua")
  templates = set.templates
  records = {}
  local i = 0
  for line in io.lines(dir .. "/requests.tsv") do
    if i % nthreads == tid then
      records[#records + 1] = line
    end
    i = i + 1
  end
  pos = 0
  wraps = 0
  sent = 0
  statuses = {}
  local opts = args[3] or ""
  once = string.find(opts, "once", 1, true) ~= nil
  marker = args[4]
  if string.find(opts, "count", 1, true) then
    response = function(status, headers, body)
      statuses[status] = (statuses[status] or 0) + 1
    end
  end
end

local function build(record)
  local f = {}
  for field in string.gmatch(record, "[^\t]+") do
    f[#f + 1] = field
  end
  local tmpl = templates[tonumber(f[1]) + 1]
  local parts = {}
  for k = 1, #tmpl do
    local piece = tmpl[k]
    if type(piece) == "number" then
      parts[k] = f[piece + 1]
    else
      parts[k] = piece
    end
  end
  return table.concat(parts)
end

function request()
  pos = pos + 1
  if pos > #records then
    if once then
      -- Stop this thread; the request returned now is the last record again,
      -- which a deduplicating server acknowledges as a duplicate.
      wrk.thread:stop()
      pos = #records
      if marker and not marked then
        local fh = io.open(marker .. tid, "w")
        if fh then fh:close() end
        marked = true
      end
    else
      pos = 1
      wraps = wraps + 1
    end
  end
  sent = sent + 1
  return build(records[pos])
end

function done(summary, latency, requests)
  local wrapped, total_sent = 0, 0
  local codes = {}
  for _, thread in ipairs(threads) do
    wrapped = wrapped + (thread:get("wraps") or 0)
    total_sent = total_sent + (thread:get("sent") or 0)
    local st = thread:get("statuses")
    if st then
      for code, n in pairs(st) do
        codes[code] = (codes[code] or 0) + n
      end
    end
  end
  local pcts = {}
  for _, p in ipairs({50, 75, 90, 99, 99.9, 99.99}) do
    pcts[#pcts + 1] = string.format('"%s":%d', tostring(p), latency:percentile(p))
  end
  local status_items = {}
  for code, n in pairs(codes) do
    status_items[#status_items + 1] = string.format('"%d":%d', code, n)
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH-JSON {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
      .. '"latency_us":{"min":%d,"max":%d,"mean":%.1f,"stdev":%.1f,"p":{%s}},'
      .. '"wraps":%d,"sent":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev, table.concat(pcts, ","),
    wrapped, total_sent, table.concat(status_items, ",")))
end
