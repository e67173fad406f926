package checks_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/types"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/tools/go/packages"

	"github.com/mintgate/mintgate/shared/bucket"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/keys"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
)

const redisACL = "deploy/redis/users.acl"

// aclUser is one user line of the ACL template: its commands (+name) and
// key patterns (~pattern), and the whole line.
type aclUser struct {
	line     string
	commands []string
	keys     []string
}

func loadACL(t *testing.T) map[string]aclUser {
	t.Helper()
	users := map[string]aclUser{}
	for line := range strings.Lines(readFile(t, redisACL)) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "user" {
			continue
		}
		u := aclUser{line: strings.TrimSpace(line)}
		for _, rule := range f[2:] {
			switch {
			case strings.HasPrefix(rule, "+"):
				u.commands = append(u.commands, strings.ToLower(rule[1:]))
			case strings.HasPrefix(rule, "~"):
				u.keys = append(u.keys, rule[1:])
			}
		}
		users[f[1]] = u
	}
	return users
}

// clientCommands are what go-redis sends by itself, never named in our
// code: the handshake and the cluster client's discovery and redirects.
var clientCommands = map[string]string{
	"hello":         "every new connection: HELLO 3 AUTH <user> <password>",
	"cluster|slots": "the cluster client's slot map",
	"command":       "the cluster client's table of key positions",
	"asking":        "the cluster client following an ASK redirect while slots move",
}

// TestRedisACLCoversTheCode: the mintgate user may run exactly the commands
// the code sends (go-redis calls in every file that imports go-redis, the
// redis.call()s of every Lua script, and what go-redis sends by itself), on
// exactly mintgate's keys. A command added to the code and not to the ACL,
// or left in the ACL after the code stopped sending it, fails here.
func TestRedisACLCoversTheCode(t *testing.T) {
	users := loadACL(t)
	if d, ok := users["default"]; !ok || !strings.Contains(d.line, " off") || len(d.commands) > 0 {
		t.Errorf("the default user must be off with no rights, got %q", d.line)
	}
	m, ok := users["mintgate"]
	if !ok {
		t.Fatalf("%s has no user mintgate", redisACL)
	}
	for _, bad := range []string{"nopass", "allkeys", "allcommands", "allchannels", "&*", "~*", "+@"} {
		if strings.Contains(m.line, bad) {
			t.Errorf("user mintgate has %q: only named commands on mintgate's keys", bad)
		}
	}
	for _, need := range []string{"resetkeys", "resetchannels", "-@all", "#@MINTGATE_PASSWORD_SHA256@"} {
		if !strings.Contains(m.line, need) {
			t.Errorf("user mintgate lacks %q", need)
		}
	}

	used := codeCommands(t)
	for c := range clientCommands {
		used[c] = append(used[c], "go-redis")
	}
	for c, where := range used {
		if !slices.Contains(m.commands, c) {
			t.Errorf("the code sends %s (%s), the ACL user mintgate may not", strings.ToUpper(c), strings.Join(where, ", "))
		}
	}
	for _, c := range m.commands {
		if _, ok := used[c]; !ok {
			t.Errorf("the ACL lets mintgate run %s, which no code sends: drop it", strings.ToUpper(c))
		}
	}

	// Every key the code builds matches a pattern of the user.
	for _, prefix := range keyPrefixes(t) {
		k := prefix + "{t:acme}:x"
		if !slices.ContainsFunc(m.keys, func(p string) bool { ok, _ := path.Match(p, k); return ok }) {
			t.Errorf("shared/keys builds %s… keys, the ACL user mintgate reaches only %q", prefix, m.keys)
		}
	}
	for _, k := range []string{keys.Bucket("acme", "u:alice"), keys.TenantBucket("acme"), keys.Idempotency("acme", "u:alice", "k"),
		keys.Done("acme", "x"), keys.Refunded("acme", "x"), keys.Grant("acme", "x")} {
		if !slices.ContainsFunc(m.keys, func(p string) bool { ok, _ := path.Match(p, k); return ok }) {
			t.Errorf("key %s is out of the ACL user's reach %q", k, m.keys)
		}
	}
}

// codeCommands are the Redis commands the module's code sends, each with
// the files that send it: every call of a go-redis client or pipeline
// method, and of redis.Script (EVALSHA, then EVAL after NOSCRIPT), found by
// type, in the module's packages (tests and integration/ aside), and every
// redis.call() of a Lua script.
func codeCommands(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(cmd, where string) {
		if !slices.Contains(used[cmd], where) {
			used[cmd] = append(used[cmd], where)
		}
	}
	r := root(t)
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  r,
	}, "./...")
	if err != nil {
		t.Fatal(err)
	}
	const goRedis = "github.com/redis/go-redis/v9"
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		// Tests and the bench's load tool (its Redis GET row is a reference
		// measurement, run as Redis's default user) are not the services.
		if strings.Contains(p.PkgPath, "/integration") || strings.HasSuffix(p.PkgPath, "/deploy/bench") {
			continue
		}
		for _, f := range p.Syntax {
			rel, _ := filepath.Rel(r, p.Fset.File(f.Pos()).Name())
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				fn, ok := p.TypesInfo.Uses[sel.Sel].(*types.Func)
				if !ok || fn.Signature().Recv() == nil {
					return true
				}
				recv := types.TypeString(fn.Signature().Recv().Type(), nil)
				switch {
				case recv == "*"+goRedis+".Script":
					switch fn.Name() {
					case "Run", "EvalSha":
						add("evalsha", rel)
						add("eval", rel)
					case "RunRO", "EvalShaRO":
						add("evalsha_ro", rel)
						add("eval_ro", rel)
					case "Eval":
						add("eval", rel)
					case "Load":
						add("script|load", rel)
					case "Exists":
						add("script|exists", rel)
					}
				case fn.Pkg() != nil && fn.Pkg().Path() == goRedis && (fn.Name() == "TxPipeline" || fn.Name() == "TxPipelined"):
					// A transaction: its commands between MULTI and EXEC.
					add("multi", rel)
					add("exec", rel)
				case !sendsCommand(fn, goRedis):
				case fn.Name() == "Do" || fn.Name() == "Process":
					t.Errorf("%s: %s.%s sends a command the test cannot name; use a typed method", rel, recv, fn.Name())
				default:
					add(redisCommand(fn.Name()), rel)
				}
				return true
			})
		}
	}
	lua := regexp.MustCompile(`redis\.p?call\(\s*['"](\w+)['"]`)
	err = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "integration") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".lua") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		for _, m := range lua.FindAllStringSubmatch(string(b), -1) {
			add(strings.ToLower(m[1]), rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatal("found no Redis command in the code")
	}
	return used
}

// sendsCommand reports whether fn is a method answering one go-redis
// command result (*redis.StatusCmd, *redis.IntCmd, …): a client's or a
// pipeline's method, or one of the small interfaces the services declare
// over them.
func sendsCommand(fn *types.Func, goRedis string) bool {
	res := fn.Signature().Results()
	if res.Len() != 1 {
		return false
	}
	ptr, ok := res.At(0).Type().(*types.Pointer)
	if !ok {
		return false
	}
	named, ok := ptr.Elem().(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == goRedis && strings.HasSuffix(named.Obj().Name(), "Cmd")
}

// redisCommand is the command (ACL name) a go-redis method sends.
func redisCommand(method string) string {
	for _, prefix := range []string{"Script", "Cluster", "Client", "Config", "ACL", "Function", "Command", "Memory", "Object", "XInfo", "XGroup", "PubSub", "Slowlog", "Latency"} {
		if rest, ok := strings.CutPrefix(method, prefix); ok && rest != "" && method != "Command" {
			return strings.ToLower(prefix) + "|" + strings.ToLower(rest)
		}
	}
	switch method {
	case "SetArgs", "SetEx", "SetNX", "SetXX":
		return "set" // go-redis sends them as SET … EX/NX/XX
	}
	return strings.ToLower(method)
}

// keyPrefixes are the first segments of the keys shared/keys builds.
func keyPrefixes(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root(t), "shared", "keys", "*.go"))
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`return "([a-z]+:)[a-z:]*" \+ tag\(`).FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no key format found in shared/keys")
	}
	return out
}

// TestRedisACLOnARealServer: redis-server as the stacks run it (TLS only,
// the rendered ACL): the mintgate user logs in over rediss:// through the
// services' own configuration and runs the limiter's script and the
// completer's and status's commands without one ACL denial; everything
// else is refused — FLUSHALL, CONFIG, KEYS, other keys, a script reaching
// past its keys, pub/sub — and so are clients without a password or a
// trusted certificate.
func TestRedisACLOnARealServer(t *testing.T) {
	ctx := context.Background()
	sec := devSecrets(t, "127.0.0.1")
	secret := func(name string) string {
		b, err := os.ReadFile(filepath.Join(sec, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	port := testenv.FreePort(t)
	srv := testenv.StartProcess(t, testenv.Binary(t, "redis-server"), nil,
		"--port", "0", "--tls-port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--tls-cert-file", filepath.Join(sec, "tls.crt"), "--tls-key-file", filepath.Join(sec, "tls.key"),
		"--tls-ca-cert-file", filepath.Join(sec, "ca.crt"), "--tls-auth-clients", "no",
		"--aclfile", filepath.Join(sec, "redis-users.acl"))

	client := func(user, password, ca string) redis.UniversalClient {
		t.Helper()
		url := fmt.Sprintf("rediss://127.0.0.1:%d/0", port)
		if user != "" {
			url = fmt.Sprintf("rediss://%s:%s@127.0.0.1:%d/0", user, password, port)
		}
		e := config.New(func(k string) string {
			return map[string]string{"MINTGATE_REDIS_URL": url, "MINTGATE_REDIS_CA": ca, "MINTGATE_REDIS_TIMEOUT": "2s"}[k]
		})
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
	ca := filepath.Join(sec, "ca.crt")
	admin := client("admin", secret("redis-admin-password"), ca)
	for deadline := time.Now().Add(15 * time.Second); admin.Ping(ctx).Err() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not answer over TLS: %v\n%s", admin.Ping(ctx).Err(), srv.Output())
		}
	}
	aclLog := func() []string {
		t.Helper()
		entries, err := admin.ACLLog(ctx, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Reason+" "+e.Object)
		}
		slices.Sort(out)
		return out
	}

	// What the services do, as the ACL user, through their configuration.
	m := client("mintgate", secret("redis-password"), ca)
	if err := m.Ping(ctx).Err(); err != nil {
		t.Fatalf("mintgate over rediss://: %v", err)
	}
	// Every operation of a grant's life, as the services run them.
	limit := bucket.Limit{Capacity: 5, Rate: 1}
	store := quota.New(m)
	ask := quota.Ask{Tenant: "acme", Idem: keys.Idempotency("acme", "u:alice", "k1"), Fingerprint: "fp", Nonce: "n1",
		Buckets: []bucket.Bucket{{Key: keys.Bucket("acme", "u:alice"), Limit: limit}, {Key: keys.TenantBucket("acme"), Limit: limit}}}
	d, err := store.Spend(ctx, time.Now(), ask, time.Minute)
	if err != nil || d.Outcome != quota.Allowed {
		t.Fatalf("the sign script as mintgate: %+v, %v", d, err)
	}
	if err := store.Finish(ctx, ask, quota.Finished{URLID: "u1", Subject: "u:alice", Body: []byte("{}"), ExpiresAt: time.Now(),
		RecordTTL: time.Minute, GrantTTL: time.Minute}); err != nil {
		t.Errorf("the completing write: %v", err)
	}
	if _, err := store.Undo(ctx, time.Now(), ask, "u2"); err != nil {
		t.Errorf("the signer's undo: %v", err)
	}
	if _, err := store.Cancel(ctx, time.Now(), ask); err != nil {
		t.Errorf("the signer's cancel of a spend cut short: %v", err)
	}
	if _, err := store.Refund(ctx, time.Now(), []quota.Due{{Tenant: "acme", URLID: "u3", Buckets: ask.Buckets}}); err != nil {
		t.Errorf("the sweeper's refund: %v", err)
	}
	if err := m.Set(ctx, keys.Done("acme", "u1"), "1", time.Minute).Err(); err != nil {
		t.Errorf("the completer's done marker: %v", err)
	}
	if _, err := store.Status(ctx, "acme", "u1"); err != nil {
		t.Errorf("the status read: %v", err)
	}
	if got := aclLog(); len(got) > 0 {
		t.Errorf("the services' own commands were denied: %q", got)
	}

	// What they must not do.
	for _, cmd := range [][]any{
		{"flushall"}, {"flushdb"}, {"config", "get", "*"}, {"config", "set", "appendonly", "no"},
		{"keys", "*"}, {"scan", "0"}, {"script", "flush"}, {"debug", "object", "x"}, {"acl", "list"},
		{"client", "list"}, {"monitor"}, {"shutdown"}, {"subscribe", "x"},
		{"hgetall", keys.TenantBucket("acme")}, {"set", "other:x", "1"}, {"hset", "session:1", "a", "b"},
		{"eval", "return redis.call('SET', KEYS[1], '1')", "1", "other:x"},
		{"eval", "return redis.call('FLUSHALL')", "0"},
	} {
		// NOPERM, or the script's and DEBUG's own words for it.
		err := m.Do(ctx, cmd...).Err()
		if err == nil || !regexp.MustCompile(`NOPERM|can't run this command|command not allowed`).MatchString(err.Error()) {
			t.Errorf("mintgate %v: %v, want a refusal", cmd, err)
		}
	}
	if n, _ := admin.Exists(ctx, "other:x").Result(); n != 0 {
		t.Error("a denied write landed")
	}
	if n, _ := admin.DBSize(ctx).Result(); n == 0 {
		t.Error("the data is gone: a FLUSH went through")
	}

	// Who must not get in at all.
	if err := client("", "", ca).Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no user: %v, want NOAUTH", err)
	}
	if err := client("mintgate", "wrong", ca).Ping(ctx).Err(); err == nil {
		t.Error("a wrong password logged in")
	}
	if err := client("mintgate", secret("redis-password"), "").Ping(ctx).Err(); err == nil {
		t.Error("connected to a server whose certificate no trusted CA signed")
	}
	plain := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Username: "mintgate",
		Password: secret("redis-password"), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("the server answered without TLS")
	}
}
