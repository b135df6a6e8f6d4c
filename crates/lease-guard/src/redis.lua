#!lua name=lease
-- The lease fence guard for Redis 7 (docs/GUARDS.md is the protocol). Every function takes
-- KEYS[1], the value's key, and KEYS[2], its fence key (in the same hash slot), and ARGV[1],
-- the presented fence: a decimal integer from 0 to 9223372036854775807. The check and the
-- write are one atomic call. Replies: {1, fence} admitted, {0, current} refused (a stale
-- fence: nothing was written). The fence key is never deleted and never expires.

local VERSION = 1
local MAX = '9223372036854775807'

-- A fence as text, checked: digits only, no leading zero, at most MAX. Lua's numbers are
-- doubles, which cannot hold every fence, so fences are compared as decimal strings.
local function checked(fence)
  if type(fence) ~= 'string' or not string.match(fence, '^%d+$') then
    return nil
  end
  if #fence > 1 and string.sub(fence, 1, 1) == '0' then
    return nil
  end
  if #fence > #MAX or (#fence == #MAX and fence > MAX) then
    return nil
  end
  return fence
end

local function lower(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- The rule (lease_domain::decide_guard): admitted when the presented fence is at least the
-- highest seen; records it. Returns nil when admitted, else the refusal's reply.
local function admit(keys, args)
  if #keys ~= 2 then
    return redis.error_reply('ERR lease: two keys are needed, the value key and its fence key')
  end
  local presented = checked(args[1])
  if not presented then
    return redis.error_reply('ERR lease: the fence must be an integer from 0 to ' .. MAX)
  end
  local current = redis.call('GET', keys[2])
  if current and lower(presented, current) then
    return {0, current}
  end
  redis.call('SET', keys[2], presented)
  return nil
end

-- lease_set(value key, fence key; fence, value[, expiry in milliseconds])
local function lease_set(keys, args)
  local ms = args[3]
  if ms and not string.match(ms, '^[1-9]%d*$') then
    return redis.error_reply('ERR lease: the expiry must be a positive number of milliseconds')
  end
  if args[2] == nil then
    return redis.error_reply('ERR lease: lease_set takes a fence and a value')
  end
  local refused = admit(keys, args)
  if refused then
    return refused
  end
  if ms then
    redis.call('SET', keys[1], args[2], 'PX', ms)
  else
    redis.call('SET', keys[1], args[2])
  end
  return {1, args[1]}
end

-- lease_del(value key, fence key; fence)
local function lease_del(keys, args)
  local refused = admit(keys, args)
  if refused then
    return refused
  end
  redis.call('DEL', keys[1])
  return {1, args[1]}
end

-- lease_hset(hash key, fence key; fence, field, value[, field, value ...])
local function lease_hset(keys, args)
  if #args < 3 or #args % 2 ~= 1 then
    return redis.error_reply('ERR lease: lease_hset takes a fence and field value pairs')
  end
  local refused = admit(keys, args)
  if refused then
    return refused
  end
  redis.call('HSET', keys[1], unpack(args, 2))
  return {1, args[1]}
end

redis.register_function('lease_set', lease_set)
redis.register_function('lease_del', lease_del)
redis.register_function('lease_hset', lease_hset)
redis.register_function{
  function_name = 'lease_version',
  callback = function() return VERSION end,
  flags = {'no-writes'},
}
