package checks_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nkeys"
)

// loadCompose loads docker-compose.yml as `docker compose` does (the same
// library: schema validation, interpolation with the defaults in the file,
// merge keys, normalisation), with an empty environment.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	dir := root(t)
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping{},
	})
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// The store of uploads and their events in the compose stack.
const objectStore = "localstack"

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"redis", "nats", objectStore, signer, completer, sweeper} {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("no %s service", name)
		}
	}
	for _, name := range everyService {
		s := p.Services[name]
		if s.Build == nil {
			t.Errorf("%s: not built from the repository", name)
			continue
		}
		if s.Build.Context != root(t) || s.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("%s: built from %s with %s, want the repository root with deploy/Dockerfile", name, s.Build.Context, s.Build.Dockerfile)
		}
		if v := s.Build.Args["SERVICE"]; v == nil || *v != name {
			t.Errorf("%s: build.args.SERVICE = %v, want %s", name, v, name)
		}
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") {
			t.Errorf("%s: want read_only and cap_drop ALL (a static binary needs neither a writable root nor capabilities)", name)
		}
	}
}

// imageRef splits an image reference into repository and tag.
func imageRef(image string) (repo, tag string) {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

// TestComposeImagesPinned: `docker compose up` next month runs what it runs
// today. Every image has a version tag; the servers are the ones we tested
// against (Redis 7, NATS ≥ 2.12 for message scheduling, LocalStack 4).
func TestComposeImagesPinned(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		_, tag := imageRef(s.Image)
		if tag == "" || tag == "latest" || tag == "stable" || tag == "alpine" {
			t.Errorf("%s: image %q is not pinned to a version tag", name, s.Image)
		}
		full := `^v?\d+\.\d+\.\d+`
		if repo, _ := imageRef(s.Image); repo == "postgres" {
			full = `^\d+\.\d+-` // PostgreSQL's versions are major.minor since 10
		}
		if s.Build == nil && !regexp.MustCompile(full).MatchString(tag) {
			t.Errorf("%s: image %q: want a full version (major.minor.patch)", name, s.Image)
		}
	}
	want := map[string]*regexp.Regexp{
		"redis":     regexp.MustCompile(`^redis:7\.\d+\.\d+(-alpine)?$`),
		"nats":      regexp.MustCompile(`^nats:2\.(\d+)\.\d+(-alpine)?$`),
		objectStore: regexp.MustCompile(`^localstack/localstack:4\.\d+\.\d+$`),
	}
	for name, re := range want {
		if !re.MatchString(p.Services[name].Image) {
			t.Errorf("%s: image %q, want %s", name, p.Services[name].Image, re)
		}
	}
	if m := want["nats"].FindStringSubmatch(p.Services["nats"].Image); m != nil {
		if minor, _ := strconv.Atoi(m[1]); minor < 12 {
			t.Errorf("nats: %s has no JetStream message scheduling (2.12 and later)", p.Services["nats"].Image)
		}
	}
}

// TestComposeHealth: every service has a healthcheck, and nothing of ours
// starts before what it talks to is healthy. Our images are distroless (no
// shell, no curl), so each of our services checks itself by running its own
// binary, the image's ENTRYPOINT, with -healthcheck.
func TestComposeHealth(t *testing.T) {
	p := loadCompose(t)
	healthy := func(name string) bool {
		hc := p.Services[name].HealthCheck
		return hc != nil && !hc.Disable && len(hc.Test) > 1 && hc.Test[0] != "NONE"
	}
	for name := range p.Services {
		if name == operatorUser {
			// The one-shot operator step: it exits when the streams are
			// made, and must not be restarted.
			if healthy(name) || p.Services[name].Restart != "no" {
				t.Errorf("%s: a one-shot step, want no healthcheck and restart \"no\" (restart %q)", name, p.Services[name].Restart)
			}
			continue
		}
		if !healthy(name) {
			t.Errorf("%s: no healthcheck", name)
		}
	}
	var entrypoint []string
	for _, in := range dockerInstructions(readFile(t, "deploy/Dockerfile")) {
		if in.cmd == "ENTRYPOINT" {
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Fatalf("deploy/Dockerfile: ENTRYPOINT %s: %v", in.args, err)
			}
		}
	}
	want := append(append([]string{"CMD"}, entrypoint...), "-healthcheck")
	for _, name := range everyService {
		hc := p.Services[name].HealthCheck
		if hc == nil {
			continue
		}
		if !slices.Equal(hc.Test, want) {
			t.Errorf("%s: healthcheck %q, want %q (the image has no shell or curl)", name, hc.Test, want)
		}
		// The probe gives up after 2 s; a shorter timeout would kill it first.
		if hc.Timeout == nil || time.Duration(*hc.Timeout) <= 2*time.Second {
			t.Errorf("%s: healthcheck timeout %v, want more than the probe's 2s", name, hc.Timeout)
		}
	}
	// The services that open a stream start only after the operator step
	// made it (their NATS users cannot).
	wantDeps := map[string][]string{
		signer:       {"redis", "nats", operatorUser},
		completer:    {"redis", objectStore, "nats", operatorUser}, // its events' stream and the webhooks'
		sweeper:      {"redis", "nats", operatorUser},
		operatorUser: {"nats"},
	}
	for name, s := range p.Services {
		if len(s.DependsOn) == 0 && !healthy(name) {
			t.Errorf("%s: neither a healthcheck nor a dependency", name)
		}
		for dep, d := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is no service", name, dep)
			}
			if dep == operatorUser {
				if d.Condition != types.ServiceConditionCompletedSuccessfully {
					t.Errorf("%s: depends on %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionCompletedSuccessfully)
				}
				continue
			}
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: depends on %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionHealthy)
			} else if !healthy(dep) {
				t.Errorf("%s: waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		for _, dep := range wantDeps[name] {
			if _, ok := s.DependsOn[dep]; !ok {
				t.Errorf("%s: does not wait for %s", name, dep)
			}
		}
	}
}

// TestComposePorts: nothing is reachable from outside this machine.
func TestComposePorts(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: port %d published on %q, want 127.0.0.1", name, port.Target, port.HostIP)
			}
		}
	}
	for name, port := range httpPort {
		s := p.Services[name]
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Target == uint32(port) && pc.Published == strconv.Itoa(port)
		}) {
			t.Errorf("%s: port %d not published on 127.0.0.1:%d", name, port, port)
		}
	}
	if !slices.ContainsFunc(p.Services[objectStore].Ports, func(pc types.ServicePortConfig) bool { return pc.Target == 4566 }) {
		t.Errorf("%s: S3 not published: the presigned URLs point at 127.0.0.1:4566", objectStore)
	}
}

// TestComposeEnvironment: our services get documented names only (docs/configuration.md), with values
// the services accept, pointing at the stack's own servers.
func TestComposeEnvironment(t *testing.T) {
	p := loadCompose(t)
	for _, name := range everyService {
		env := map[string]string{}
		for k, v := range p.Services[name].Environment {
			if v == nil {
				t.Errorf("%s: %s has no value", name, k)
				continue
			}
			env[k] = *v
		}
		checkServiceEnv(t, "docker-compose.yml", name, env)
		checkCredentials(t, "docker-compose.yml", name, env)
		for _, k := range []string{"MINTGATE_REDIS_URL", "MINTGATE_NATS_URL", "MINTGATE_SQS_ENDPOINT", "MINTGATE_SQS_QUEUE_URL"} {
			if v, ok := env[k]; ok {
				if _, isService := p.Services[hostOf(v)]; !isService {
					t.Errorf("%s: %s=%s does not point at a service of the stack", name, k, v)
				}
			}
		}
	}
	// A setting read by several services means one thing: the sweeper refunds
	// by the signer's tiers, the completer sizes done markers by its TTL.
	seen := map[string]string{}
	for _, name := range everyService {
		for k, v := range p.Services[name].Environment {
			// Each listens on its own port and logs in to NATS as itself.
			if prev, ok := seen[k]; ok && v != nil && *v != prev && k != "MINTGATE_HTTP_ADDR" && k != "MINTGATE_NATS_CREDS" {
				t.Errorf("%s: %s=%s, another service has %s", name, k, *v, prev)
			}
			if v != nil {
				seen[k] = *v
			}
		}
	}

	// The URLs the signer hands out are used from the host: they must point
	// at the published S3 port, not at a name only the compose network knows.
	if v := envValue(p, signer, "MINTGATE_S3_ENDPOINT"); hostOf(v) != "127.0.0.1" {
		t.Errorf("signer: MINTGATE_S3_ENDPOINT should be the published http://127.0.0.1:4566, got %q", v)
	}
}

// TestComposeStores: the servers keep what a restart must not lose, with the
// configuration we ship.
func TestComposeStores(t *testing.T) {
	p := loadCompose(t)

	redis := strings.Join(p.Services["redis"].Command, " ")
	for _, want := range []string{"--appendonly yes", "--appendfsync everysec"} {
		if !strings.Contains(redis, want) {
			t.Errorf("redis: command %q lacks %s", redis, want)
		}
	}
	if !mounts(p.Services["redis"], "", "/data") {
		t.Error("redis: /data (the AOF) is not on a volume")
	}

	nats := p.Services["nats"]
	conf := filepath.Join(root(t), "deploy", "nats", "nats.conf")
	if !mounts(nats, conf, "") {
		t.Errorf("nats: %s is not mounted", conf)
	}
	if !mounts(nats, "", "/data") {
		t.Error("nats: the JetStream store (/data) is not on a volume")
	}
	if !slices.ContainsFunc(nats.Command, func(a string) bool { return a == "--config" || a == "-c" }) {
		t.Errorf("nats: command %q does not load the mounted config", nats.Command)
	}

	init := filepath.Join(root(t), "deploy", "localstack", "init-aws.sh")
	if !mounts(p.Services[objectStore], init, "/etc/localstack/init/ready.d/") {
		t.Errorf("%s: %s is not mounted as a ready hook", objectStore, init)
	}
}

// envValue is a service's variable, or "" when it is not set.
func envValue(p *types.Project, service, name string) string {
	if v := p.Services[service].Environment[name]; v != nil {
		return *v
	}
	return ""
}

// mounts reports whether s mounts source (when given) at a target starting
// with target (when given).
func mounts(s types.ServiceConfig, source, target string) bool {
	return slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return (source == "" || v.Source == source) && strings.HasPrefix(v.Target, target)
	})
}

// TestLocalStackInit: the ready hook is valid bash and creates what the
// services are configured for, in the shape terraform gives it on AWS.
func TestLocalStackInit(t *testing.T) {
	const script = "deploy/localstack/init-aws.sh"
	if out, err := exec.Command("bash", "-n", filepath.Join(root(t), script)).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", script, err, out)
	}
	text := readFile(t, script)
	for _, want := range []string{
		`"RedrivePolicy"`, `deadLetterTargetArn`, `maxReceiveCount`,
		`"Events": ["s3:ObjectCreated:*"]`, `{"Name": "prefix", "Value": "incoming/"}`,
		`aws:SourceArn`, `put-bucket-notification-configuration`, `touch "$marker"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %s", script, want)
		}
	}

	p := loadCompose(t)
	defaults := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+)=\$\{\w+:-([^}]*)\}`).FindAllStringSubmatch(text, -1) {
		defaults[m[1]] = m[2]
	}
	if v := envValue(p, signer, "MINTGATE_S3_BUCKET"); v != defaults["bucket"] {
		t.Errorf("signer uploads to bucket %q, the init script creates %q", v, defaults["bucket"])
	}
	if v := envValue(p, completer, "MINTGATE_SQS_QUEUE_URL"); !strings.HasSuffix(v, "/"+defaults["queue"]) {
		t.Errorf("completer reads queue %q, the init script creates %q", v, defaults["queue"])
	}
	hc := strings.Join(p.Services[objectStore].HealthCheck.Test, " ")
	if !strings.Contains(hc, defaults["marker"]) {
		t.Errorf("%s healthcheck %q does not wait for the init script's marker %s", objectStore, hc, defaults["marker"])
	}
}

// devSecretsDir holds the compose stack's public, development-only secrets.
const devSecretsDir = "deploy/compose/dev-secrets"

// TestComposeCredentials: the compose stack's servers and services agree
// on their credentials. Redis runs TLS only with the ACL file rendered from
// deploy/redis/users.acl for the password the services use; NATS runs with
// authorization.conf beside its config and the public keys of the seeds the
// services hold; both certificates are signed by the CA the services trust
// for the names they dial.
func TestComposeCredentials(t *testing.T) {
	p := loadCompose(t)
	dev := filepath.Join(root(t), devSecretsDir)

	// Redis: TLS only, the ACL file, and the password everyone uses.
	redis := p.Services["redis"]
	cmd := " " + strings.Join(redis.Command, " ") + " "
	for _, want := range []string{" --port 0 ", " --tls-port 6379 ", " --aclfile /etc/redis/users.acl "} {
		if !strings.Contains(cmd, want) {
			t.Errorf("redis: command %q lacks %s", cmd, strings.TrimSpace(want))
		}
	}
	if !mounts(redis, filepath.Join(dev, "redis-users.acl"), "/etc/redis/users.acl") {
		t.Errorf("redis: %s/redis-users.acl is not its ACL file", devSecretsDir)
	}
	u, err := url.Parse(envValue(p, signer, "MINTGATE_REDIS_URL"))
	if err != nil || u.User == nil {
		t.Fatalf("signer's MINTGATE_REDIS_URL: %v", err)
	}
	password, _ := u.User.Password()
	if got := envValue(p, "redis", "REDISCLI_AUTH"); got != password {
		t.Errorf("redis: the healthcheck logs in with %q, the services with %q", got, password)
	}
	if got := strings.TrimSpace(readFile(t, devSecretsDir+"/redis-password")); got != password {
		t.Errorf("%s/redis-password is %q, the services use %q", devSecretsDir, got, password)
	}
	acl := readFile(t, devSecretsDir+"/redis-users.acl")
	sum := sha256.Sum256([]byte(password))
	for line := range strings.Lines(readFile(t, redisACL)) {
		if strings.HasPrefix(line, "user mintgate ") {
			want := strings.Replace(line, "@MINTGATE_PASSWORD_SHA256@", hex.EncodeToString(sum[:]), 1)
			if !strings.Contains(acl, want) {
				t.Errorf("%s/redis-users.acl is not %s rendered for the services' password: run the command in %s/README.md",
					devSecretsDir, redisACL, devSecretsDir)
			}
		}
	}

	// NATS: authorization.conf beside the config, the users' public keys.
	nats := p.Services["nats"]
	if !mounts(nats, filepath.Join(root(t), "deploy", "nats", authorizationConf), "/etc/nats/"+authorizationConf) {
		t.Errorf("nats: %s is not mounted beside /etc/nats/mintgate.conf, which includes it", authorizationConf)
	}
	for _, service := range []string{signer, sweeper, operatorUser} {
		creds := envValue(p, service, "MINTGATE_NATS_CREDS")
		name, ok := strings.CutPrefix(creds, "/run/secrets/")
		if !ok || !slices.ContainsFunc(p.Services[service].Secrets, func(s types.ServiceSecretConfig) bool { return s.Source == name }) {
			t.Errorf("%s: MINTGATE_NATS_CREDS=%s is not one of its compose secrets", service, creds)
			continue
		}
		seed, err := os.ReadFile(p.Secrets[name].File)
		if err != nil {
			t.Errorf("%s: secret %s: %v", service, name, err)
			continue
		}
		kp, err := nkeys.ParseDecoratedNKey(seed)
		if err != nil {
			t.Errorf("%s: secret %s: %v", service, name, err)
			continue
		}
		pub, _ := kp.PublicKey()
		if got := envValue(p, "nats", "NATS_"+strings.ToUpper(service)+"_NKEY"); got != pub {
			t.Errorf("nats knows %s as %q, its seed's public key is %s", service, got, pub)
		}
	}

	// TLS: the services trust the CA that signed the servers' certificate.
	for _, server := range []string{"redis", "nats"} {
		if !mounts(p.Services[server], filepath.Join(dev, "tls.key"), "") {
			t.Errorf("%s: does not mount %s/tls.key", server, devSecretsDir)
		}
		cert := verifyCert(t, dev, server)
		if time.Until(cert.NotAfter) < 365*24*time.Hour {
			t.Errorf("%s/tls.crt expires %v: renew it (%s/README.md)", devSecretsDir, cert.NotAfter, devSecretsDir)
		}
	}
	for _, service := range everyService {
		for _, name := range []string{"MINTGATE_REDIS_CA", "MINTGATE_NATS_CA"} {
			if v := envValue(p, service, name); v != "" && !mounts(p.Services[service], filepath.Join(dev, "ca.crt"), v) {
				t.Errorf("%s: %s=%s is not %s/ca.crt", service, name, v, devSecretsDir)
			}
		}
	}
}
