package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/proc"
)

// Redis is a redis-server the test started, without persistence.
type Redis struct {
	*Process
	Addr string
}

// StartRedis starts a redis-server on a free port; it is stopped when the
// test ends. Stop and Start it again to simulate an outage: it keeps its port.
func StartRedis(tb testing.TB, extra ...string) *Redis {
	tb.Helper()
	port := FreePort(tb)
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no"}, extra...)
	r := &Redis{Process: newProcess(tb, Binary(tb, "redis-server"), args...), Addr: addr(port)}
	r.Start()
	return r
}

// Start starts the server and waits until it answers PING: a server with
// an append-only file listens while it still loads and answers -LOADING.
func (r *Redis) Start() {
	r.tb.Helper()
	r.Process.Start()
	waitTCP(r.tb, r.Process, r.Addr)
	deadline := time.Now().Add(15 * time.Second)
	for !r.pong() {
		if time.Now().After(deadline) {
			r.tb.Fatalf("testenv: %s does not answer PING:\n%s", r, r.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pong reports whether the server answers PING with +PONG.
func (r *Redis) pong() bool {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// URL is the server's redis:// URL.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// StartRedisCluster starts three cluster-enabled masters, joins them into a
// cluster covering all slots and returns their addresses.
func StartRedisCluster(tb testing.TB) []string {
	tb.Helper()
	var addrs []string
	for range 3 {
		// The bus port is chosen free like the client port: left to
		// itself it is the client port + 10000, which another test's
		// server may hold (seen: a bind failure of the bus port under load).
		r := StartRedis(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(FreePort(tb)))
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command(Binary(tb, "redis-cli"), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		for {
			host, port, _ := strings.Cut(a, ":")
			out, _ := exec.Command(Binary(tb, "redis-cli"), "-h", host, "-p", port, "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("testenv: cluster not ok on %s: %s", a, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// String names the server in test logs.
func (r *Redis) String() string { return fmt.Sprintf("redis-server %s", r.Addr) }

// ScriptStats is what an INFO commandstats answer says of scripts and
// transactions: proc.ScriptStats, here for the tests.
func ScriptStats(info string) (calls int64, spent time.Duration) { return proc.ScriptStats(info) }

// CommandCalls is what an INFO commandstats answer says of each command:
// proc.CommandCalls, here for the tests.
func CommandCalls(info string) map[string]int64 { return proc.CommandCalls(info) }
