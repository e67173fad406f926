package proc

import (
	"strconv"
	"strings"
	"time"
)

// ScriptStats is what an INFO commandstats answer says of scripts and
// transactions: how many EVALSHA, EVAL and EXEC calls Redis ran, and how
// long it spent in them and in MULTI (the commands they ran included), by
// its own clock. The commands a script or an EXEC runs are counted again
// under their own names, so those are left out.
func ScriptStats(info string) (calls int64, spent time.Duration) {
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		counted := true
		switch name {
		case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_exec":
		case "cmdstat_multi":
			counted = false // its EXEC is the call
		default:
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				if counted {
					calls += n
				}
			case "usec":
				spent += time.Duration(n) * time.Microsecond
			}
		}
	}
	return calls, spent
}

// CommandCalls is what an INFO commandstats answer says of each command:
// how many times Redis ran it, by lower-case name ("evalsha", "hmget",
// "client|setinfo").
func CommandCalls(info string) map[string]int64 {
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if k, v, _ := strings.Cut(f, "="); k == "calls" {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] += n
			}
		}
	}
	return calls
}
