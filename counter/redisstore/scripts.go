package redisstore

import _ "embed" // the Lua scripts

// The counter script is lua/common.lua, lua/batch.lua, lua/lease.lua and
// lua/run.lua, run as one chunk. Each file opens with its contract (KEYS, ARGV, reply, atomicity,
// units, stored formats); docs/redis.md has the specification and the
// history of the layout with its measurements.

// luaCommon holds the helpers of the script (tests run them with a stub
// script of their own appended).
//
//go:embed lua/common.lua
var luaCommon string

//go:embed lua/batch.lua
var luaBatchOps string

//go:embed lua/lease.lua
var luaLease string

//go:embed lua/run.lua
var luaRun string

// luaBatch is the script every store call is one operation of.
var luaBatch = luaCommon + luaBatchOps + luaLease + luaRun
