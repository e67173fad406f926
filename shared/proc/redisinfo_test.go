package proc

import (
	"testing"
	"time"
)

// A script's time is its eval lines of INFO commandstats, a transaction's
// its MULTI and EXEC; the commands they run are counted within them, not
// added again.
func TestScriptStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_hset:calls=60000,usec=82431,usec_per_call=1.37,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=20000,usec=899587,usec_per_call=44.98,rejected_calls=0,failed_calls=10\r\n" +
		"cmdstat_eval:calls=10,usec=744,usec_per_call=74.40,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_multi:calls=5,usec=2,usec_per_call=0.40,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_exec:calls=5,usec=60,usec_per_call=12.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=900,usec_per_call=300.00,rejected_calls=0,failed_calls=0\r\n"
	calls, spent := ScriptStats(info)
	if calls != 20015 || spent != 900393*time.Microsecond {
		t.Errorf("ScriptStats = %d calls, %v; want 20015 calls, 900.393ms", calls, spent)
	}
}
