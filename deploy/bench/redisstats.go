package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/proc"
)

// commandTime is the time Redis itself spent in scripts and transactions
// (EVALSHA and EVAL; MULTI and EXEC: a sign's completing write is a
// MULTI/EXEC of HSETs and PEXPIREs) since its statistics were last reset,
// the commands they ran included, from INFO commandstats: the part of a
// row's Redis CPU that is the commands' own work rather than reading and
// writing sockets (wall time: it counts a wait for a core too).
func commandTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	_, spent := proc.ScriptStats(info)
	return spent, nil
}
