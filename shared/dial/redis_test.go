package dial_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/testenv"
)

func env(m map[string]string) *config.Env {
	return config.New(func(k string) string { return m[k] })
}

// Settings that would quietly weaken TLS stop the service at start.
func TestRedisTLSSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		env      map[string]string
		variable string
	}{
		"skip_verify": {map[string]string{"MINTGATE_REDIS_URL": "rediss://u:p@redis:6379/0?skip_verify=true"}, "MINTGATE_REDIS_URL"},
		"CA, no TLS":  {map[string]string{"MINTGATE_REDIS_URL": "redis://redis:6379/0", "MINTGATE_REDIS_CA": "/ca.crt"}, "MINTGATE_REDIS_CA"},
	} {
		e := env(tc.env)
		e.Redis()
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), tc.variable) {
			t.Errorf("%s: %v; want an error naming %s", name, err, tc.variable)
		}
	}
	e := env(map[string]string{"MINTGATE_REDIS_URL": "rediss://redis:6379/0", "MINTGATE_REDIS_CA": filepath.Join(t.TempDir(), "none.crt")})
	r := e.Redis()
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := dial.Redis(r); err == nil || !strings.Contains(err.Error(), "MINTGATE_REDIS_CA") {
		t.Errorf("a missing CA file: %v; want an error naming MINTGATE_REDIS_CA", err)
	}
}

// In cluster mode the ACL user and password of MINTGATE_REDIS_URL log in to
// every node (the seeds have no place for them).
func TestRedisClusterLogsInWithTheURLsUser(t *testing.T) {
	ctx := context.Background()
	addrs := testenv.StartRedisCluster(t)
	for _, a := range addrs {
		admin := redis.NewClient(&redis.Options{Addr: a})
		for _, cmd := range [][]any{
			{"acl", "setuser", "mintgate", "on", ">cluster-pass", "~rl:*", "+@all"},
			{"acl", "setuser", "default", "off"},
		} {
			if err := admin.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%s %v: %v", a, cmd, err)
			}
		}
		admin.Close()
	}
	client := func(url string) redis.UniversalClient {
		e := env(map[string]string{"MINTGATE_REDIS_URL": url, "MINTGATE_REDIS_CLUSTER_ADDRS": strings.Join(addrs, ","), "MINTGATE_REDIS_TIMEOUT": "2s"})
		r := e.Redis()
		if err := e.Err(); err != nil {
			t.Fatal(err)
		}
		c, err := dial.Redis(r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Keys on every node: each write logs in to the node owning its slot.
	c := client("redis://mintgate:cluster-pass@unused:6379/0")
	for _, k := range []string{"rl:a", "rl:b", "rl:c", "rl:d", "rl:e", "rl:f"} {
		if err := c.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatalf("SET %s as mintgate: %v", k, err)
		}
	}
	if err := client("redis://unused:6379/0").Set(ctx, "rl:a", "1", 0).Err(); err == nil {
		t.Error("the cluster let a client in without the URL's user")
	}
}
