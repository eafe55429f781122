#!lua name=hookrouter
-- Redis Functions library for hookrouter (Redis >= 7). The algorithm is not
-- repeated here: scripts.py splices token_bucket.lua in place of the BODY
-- line and names the function after a digest of that body, so an older
-- library still loaded in Redis is detected ("Function not found") and
-- replaced with FUNCTION LOAD REPLACE.

local function token_bucket(KEYS, ARGV)
--@BODY@
end

redis.register_function('@NAME@', token_bucket)
