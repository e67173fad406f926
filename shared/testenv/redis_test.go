package testenv

import (
	"testing"
	"time"
)

// A script's time is its eval lines of INFO commandstats; the commands it
// calls are counted within them, not added again.
func TestScriptStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_hset:calls=60000,usec=82431,usec_per_call=1.37,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=20000,usec=899587,usec_per_call=44.98,rejected_calls=0,failed_calls=10\r\n" +
		"cmdstat_eval:calls=10,usec=744,usec_per_call=74.40,rejected_calls=0,failed_calls=0\r\n"
	calls, spent := ScriptStats(info)
	if calls != 20010 || spent != 900331*time.Microsecond {
		t.Errorf("ScriptStats = %d calls, %v; want 20010 calls, 900.331ms", calls, spent)
	}
}
