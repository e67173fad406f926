package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptTime is the time Redis itself spent running scripts (EVALSHA and
// EVAL, the commands they call included) since its statistics were last
// reset, from INFO commandstats: the part of a row's Redis CPU that is the
// script's own work rather than reading and writing sockets.
func scriptTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	return parseScriptTime(info), nil
}

// parseScriptTime adds the usec fields of the eval lines of an INFO
// commandstats answer.
func parseScriptTime(info string) time.Duration {
	var total time.Duration
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				us, _ := strconv.ParseInt(v, 10, 64)
				total += time.Duration(us) * time.Microsecond
			}
		}
	}
	return total
}
