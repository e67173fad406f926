package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/testenv"
)

// scriptTime is the time Redis itself spent running scripts (EVALSHA and
// EVAL, the commands they call included) since its statistics were last
// reset, from INFO commandstats: the part of a row's Redis CPU that is the
// scripts' own work rather than reading and writing sockets (wall time: it
// counts a wait for a core too).
func scriptTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	_, spent := testenv.ScriptStats(info)
	return spent, nil
}
