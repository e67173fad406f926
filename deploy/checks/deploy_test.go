package checks_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/auth"
	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/ledger"
	"github.com/mintgate/mintgate/shared/quota"
	"github.com/mintgate/mintgate/shared/testenv"
	"github.com/mintgate/mintgate/shared/tiers"
	"github.com/mintgate/mintgate/shared/webhook"
)

// The services of SPEC §5's "used by" column.
const (
	signer    = "signer"
	completer = "completer"
	sweeper   = "sweeper"
)

var everyService = []string{signer, completer, sweeper}

// operatorUser is the NATS user of the operator step (deploy/streams),
// the only one that creates and updates streams.
const operatorUser = "streams"

// specEnv is every MINTGATE_ variable of the original configuration table
// and the services that read it. The names are a public interface; a
// deployment file that sets any other MINTGATE_ name (or gives a service a
// name it never reads) is a typo or a drift. TestDeployEnvMatchesConfigurationDoc
// checks this table and addedEnv against docs/configuration.md, which
// TestConfigurationDocMatchesCode checks against the code; as an optional
// extra, TestSpecEnvMatchesSpec compares it with the team's SPEC.md where
// that file sits beside the repository.
var specEnv = map[string][]string{
	"MINTGATE_REDIS_URL":              everyService,
	"MINTGATE_REDIS_CLUSTER_ADDRS":    everyService,
	"MINTGATE_REDIS_TIMEOUT":          everyService,
	"MINTGATE_NATS_URL":               everyService, // the completer for upload-completed events (SPEC §7)
	"MINTGATE_HTTP_ADDR":              everyService,
	"MINTGATE_S3_BUCKET":              {signer, completer, sweeper}, // the completer marks only its records done (SPEC §7); the sweeper aborts multipart uploads (§8)
	"MINTGATE_S3_REGION":              {signer, completer, sweeper},
	"MINTGATE_S3_ENDPOINT":            {signer, completer, sweeper},
	"MINTGATE_S3_PATH_STYLE":          {signer, completer, sweeper},
	"MINTGATE_URL_TTL":                {signer, completer},
	"MINTGATE_MAX_OBJECT_BYTES":       {signer},
	"MINTGATE_CONTENT_TYPES":          {signer},
	"MINTGATE_TIERS":                  {signer, sweeper},
	"MINTGATE_JWT_HS256_SECRET":       {signer},
	"MINTGATE_JWT_JWKS_URL":           {signer},
	"MINTGATE_JWT_ISSUER":             {signer},
	"MINTGATE_JWT_AUDIENCE":           {signer},
	"MINTGATE_JWT_TENANT_CLAIM":       {signer},
	"MINTGATE_ANON_TENANTS":           {signer},
	"MINTGATE_IP_SOURCE":              {signer},
	"MINTGATE_TRUSTED_PROXIES":        {signer},
	"MINTGATE_IP_HASH_SECRET":         {signer},
	"MINTGATE_DEGRADED_MODE":          {signer},
	"MINTGATE_SQS_QUEUE_URL":          {completer},
	"MINTGATE_SQS_ENDPOINT":           {completer},
	"MINTGATE_SQS_VISIBILITY_TIMEOUT": {completer},
	"MINTGATE_DONE_TTL":               {completer},
	"MINTGATE_SWEEP_GRACE":            {signer, sweeper, completer},
}

// addedEnv are the names deployments set beyond specEnv's table, with the
// services that read them (docs/configuration.md).
var addedEnv = map[string][]string{
	"MINTGATE_NATS_CREDS":   everyService,
	"MINTGATE_NATS_CA":      everyService,
	"MINTGATE_REDIS_CA":     everyService,
	"MINTGATE_GRANT_SECRET": {signer, sweeper},
	"MINTGATE_OPS_ADDR":     {signer},
	// SPEC §8, multipart uploads.
	"MINTGATE_MAX_MULTIPART_BYTES":  {signer},
	"MINTGATE_MULTIPART_PART_BYTES": {signer},
	"MINTGATE_MULTIPART_TTL":        {signer},
	"MINTGATE_S3_INTERNAL_ENDPOINT": {signer, completer, sweeper},
	// SPEC §8, live grants.
	"MINTGATE_MAX_LIVE_GRANTS": {signer},
	// SPEC §9, the verification gate.
	"MINTGATE_VERIFY":           {completer},
	"MINTGATE_MAX_IMAGE_PIXELS": {completer},
	"MINTGATE_CLAMD_ADDR":       {completer},
	"MINTGATE_SCAN_MAX_BYTES":   {completer},
	// SPEC §9, webhooks.
	"MINTGATE_WEBHOOK_URL":           {completer},
	"MINTGATE_WEBHOOK_SECRET":        {completer},
	"MINTGATE_WEBHOOK_TIMEOUT":       {completer},
	"MINTGATE_WEBHOOK_RETRIES":       {completer},
	"MINTGATE_WEBHOOK_ALLOW_PRIVATE": {completer},
	"MINTGATE_TENANT_TIERS_FILE":     {signer, completer, sweeper},
	// SPEC §10, upload records.
	"MINTGATE_POSTGRES_URL": {signer, sweeper},
}

// awsEnv are the SDK's own variables, for the services that call AWS.
var awsEnv = map[string][]string{
	"AWS_ACCESS_KEY_ID":     {signer, completer, sweeper},
	"AWS_SECRET_ACCESS_KEY": {signer, completer, sweeper},
	"AWS_SESSION_TOKEN":     {signer, completer, sweeper},
	"AWS_REGION":            {signer, completer, sweeper},
}

// widenedBy7 are the services SPEC §7 and §8 add to a §5 variable's users.
var widenedBy7 = map[string][]string{
	"MINTGATE_S3_BUCKET": {completer, sweeper}, // "the completer ignores ... records whose bucket is not MINTGATE_S3_BUCKET"; §8: "the sweeper aborts the upload"
	"MINTGATE_NATS_URL":  {completer},          // "the completer (given MINTGATE_NATS_URL) publishes ... upload-completed events"
	// §8: the sweeper aborts multipart uploads, on the signer's bucket.
	// §9: the completer reads each upload (the verification gate) and
	// moves a rejected one to quarantine/.
	"MINTGATE_S3_REGION":     {sweeper, completer},
	"MINTGATE_S3_ENDPOINT":   {sweeper, completer},
	"MINTGATE_S3_PATH_STYLE": {sweeper, completer},
}

// runtimeEnv are the Go runtime's variables the manifests set, by service.
var runtimeEnv = map[string][]string{
	"GOMEMLIMIT": {signer},
	"GOGC":       {signer},
	// Tracing (docs/configuration.md, "Tracing"): the standard OTEL_*
	// variables, read by every service.
	"OTEL_EXPORTER_OTLP_ENDPOINT":        {signer, completer, sweeper},
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": {signer, completer, sweeper},
	"OTEL_EXPORTER_OTLP_PROTOCOL":        {signer, completer, sweeper},
	"OTEL_TRACES_SAMPLER":                {signer, completer, sweeper},
	"OTEL_TRACES_SAMPLER_ARG":            {signer, completer, sweeper},
	"OTEL_SERVICE_NAME":                  {signer, completer, sweeper},
	"OTEL_SDK_DISABLED":                  {signer, completer, sweeper},
}

// requiredEnv is what each service cannot do without in a deployment (a
// default that points at 127.0.0.1 is no use in a container).
var requiredEnv = map[string][]string{
	signer:    {"MINTGATE_HTTP_ADDR", "MINTGATE_REDIS_URL", "MINTGATE_NATS_URL", "MINTGATE_S3_BUCKET", "MINTGATE_JWT_HS256_SECRET", "MINTGATE_IP_HASH_SECRET", "MINTGATE_GRANT_SECRET"},
	completer: {"MINTGATE_HTTP_ADDR", "MINTGATE_REDIS_URL", "MINTGATE_SQS_QUEUE_URL", "MINTGATE_S3_BUCKET"},
	sweeper:   {"MINTGATE_HTTP_ADDR", "MINTGATE_REDIS_URL", "MINTGATE_NATS_URL", "MINTGATE_GRANT_SECRET"},
}

// httpPort is each service's port, SPEC §5's MINTGATE_HTTP_ADDR default.
var httpPort = map[string]int{signer: 8080, completer: 8081, sweeper: 8082}

// root is the repository's root folder.
func root(t *testing.T) string {
	t.Helper()
	r, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkServiceEnv checks one service's environment as a deployment gives it:
// only SPEC §5 names that this service reads, the ones it needs, and values
// the services' own parsers (shared/config) accept.
func checkServiceEnv(t *testing.T, where, service string, env map[string]string) {
	t.Helper()
	for name := range env {
		users, ok := specEnv[name]
		if !ok {
			users, ok = addedEnv[name]
		}
		if !ok {
			users, ok = awsEnv[name]
		}
		if !ok {
			users, ok = runtimeEnv[name]
		}
		switch {
		case !ok && strings.HasPrefix(name, "MINTGATE_"):
			t.Errorf("%s: %s sets %s, which is not a SPEC §5 or §7 name", where, service, name)
		case !ok:
			t.Errorf("%s: %s sets %s, which no mintgate service reads", where, service, name)
		case !slices.Contains(users, service):
			t.Errorf("%s: %s sets %s, which only %v read", where, service, name, users)
		}
	}
	for _, name := range requiredEnv[service] {
		if env[name] == "" {
			t.Errorf("%s: %s needs %s", where, service, name)
		}
	}

	e := config.New(func(name string) string { return env[name] })
	e.Redis()
	e.Duration("MINTGATE_REDIS_TIMEOUT", 150*time.Millisecond)
	urlTTL := e.Duration("MINTGATE_URL_TTL", 120*time.Second)
	grace := e.Duration("MINTGATE_SWEEP_GRACE", 30*time.Second)
	doneTTL := e.Duration("MINTGATE_DONE_TTL", 15*time.Minute)
	tiers.Read(e, "MINTGATE_TIERS", tiers.Default)
	e.URL("MINTGATE_NATS_URL", "nats://127.0.0.1:4222", "nats", "tls")
	e.URL("MINTGATE_S3_ENDPOINT", "", "http", "https")
	e.URL("MINTGATE_SQS_ENDPOINT", "", "http", "https")
	e.URL("MINTGATE_SQS_QUEUE_URL", "", "http", "https")
	e.Bool("MINTGATE_S3_PATH_STYLE", false)
	e.Int("MINTGATE_MAX_OBJECT_BYTES", 104857600)
	e.OneOf("MINTGATE_IP_SOURCE", "remote", "remote", "cf-connecting-ip", "xff")
	e.OneOf("MINTGATE_DEGRADED_MODE", "off", "off", "local")
	if service == completer {
		webhook.Read(e) // the URL's scheme, the secret's form, the retries
	}
	if err := e.Err(); err != nil {
		t.Errorf("%s: %s: %v", where, service, err)
	}
	// The completer refuses to start otherwise (SPEC §3): a done marker must
	// outlive the URL and the sweeper's grace by a wide margin (it asks for
	// twice), or a finished upload is refunded.
	if need := quota.GrantRecordTTL(urlTTL, grace); service == completer && doneTTL < need {
		t.Errorf("%s: MINTGATE_DONE_TTL %v is below 2 × (MINTGATE_URL_TTL + MINTGATE_SWEEP_GRACE) = %v", where, doneTTL, need)
	}
	// HS256 keys shorter than 32 bytes are refused by the signer (RFC 7518 §3.2).
	if s, ok := env["MINTGATE_JWT_HS256_SECRET"]; ok && len(s) < 32 {
		t.Errorf("%s: MINTGATE_JWT_HS256_SECRET is %d bytes, the signer wants at least 32", where, len(s))
	}
	if service == signer {
		if problem := trustProblem(env); problem != "" {
			t.Errorf("%s: signer: %s", where, problem)
		}
	}
	// An HS256 key may sign the issuer's tokens for other services too:
	// without an audience (and an issuer) the signer takes those (issue 17).
	if env["MINTGATE_JWT_HS256_SECRET"] != "" {
		for _, name := range []string{"MINTGATE_JWT_AUDIENCE", "MINTGATE_JWT_ISSUER"} {
			if env[name] == "" {
				t.Errorf("%s: %s verifies HS256 tokens without %s: a token the same key signed for another service is accepted", where, service, name)
			}
		}
	}
	if addr := env["MINTGATE_HTTP_ADDR"]; addr != "" && addr != fmt.Sprintf(":%d", httpPort[service]) {
		t.Errorf("%s: %s listens on %q, the documented port is :%d", where, service, addr, httpPort[service])
	}
	if env["MINTGATE_ANON_TENANTS"] != "" && env["MINTGATE_IP_HASH_SECRET"] == "" {
		t.Errorf("%s: anonymous tenants need MINTGATE_IP_HASH_SECRET", where)
	}
}

// trustedProxiesPlaceholder is the k8s base's MINTGATE_TRUSTED_PROXIES: no
// range is right for every cluster, so the operator must name theirs, and
// the signer refuses to start until an overlay does.
const trustedProxiesPlaceholder = "SET-ME-to-the-ingress-controller-addresses"

// trustProblem says what is wrong with the proxies a signer's environment
// trusts with its client-IP headers, or "" (issue 17): a header model
// without proxies named, a placeholder left in, or a range so wide
// (auth.WideProxyRange, the signer's own rule) that any pod or host in it
// can spoof X-Forwarded-For and buy a fresh anonymous bucket per request.
func trustProblem(env map[string]string) string {
	source := env["MINTGATE_IP_SOURCE"]
	if source != auth.IPXFF && source != auth.IPCF {
		return ""
	}
	proxies := strings.TrimSpace(env["MINTGATE_TRUSTED_PROXIES"])
	if proxies == "" || proxies == trustedProxiesPlaceholder {
		return fmt.Sprintf("MINTGATE_IP_SOURCE=%s needs MINTGATE_TRUSTED_PROXIES naming the operator's proxies, found %q", source, proxies)
	}
	for item := range strings.SplitSeq(proxies, ",") {
		item = strings.TrimSpace(item)
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return fmt.Sprintf("MINTGATE_TRUSTED_PROXIES: %q is not a CIDR or an address", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if auth.WideProxyRange(p) {
			return fmt.Sprintf("MINTGATE_TRUSTED_PROXIES trusts %s: every workload in it can spoof X-Forwarded-For; name the ingress controller's addresses", item)
		}
	}
	return ""
}

// checkCredentials: no service connects without credentials (issue 10):
// Redis as an ACL user with a password over TLS, NATS over TLS as the
// service's own user, both servers' certificates checked against a CA, and
// grants sealed with a MAC key of at least 32 bytes.
func checkCredentials(t *testing.T, where, service string, env map[string]string) {
	t.Helper()
	u, err := url.Parse(env["MINTGATE_REDIS_URL"])
	if err != nil || u.Scheme != "rediss" || u.User == nil || u.User.Username() == "" {
		t.Errorf("%s: %s: MINTGATE_REDIS_URL must be rediss://<user>:<password>@… (TLS and an ACL user)", where, service)
	} else if p, _ := u.User.Password(); p == "" {
		t.Errorf("%s: %s: MINTGATE_REDIS_URL has no password", where, service)
	}
	if env["MINTGATE_REDIS_CA"] == "" {
		t.Errorf("%s: %s: no MINTGATE_REDIS_CA: the Redis certificate's CA", where, service)
	}
	// The grant ledger's users need NATS; the completer only for its
	// upload-completed events, and only when a deployment turns them on.
	usesLedger := slices.Contains(addedEnv["MINTGATE_GRANT_SECRET"], service)
	if !usesLedger && env["MINTGATE_NATS_URL"] == "" {
		return
	}
	for item := range strings.SplitSeq(env["MINTGATE_NATS_URL"], ",") {
		if u, err := url.Parse(strings.TrimSpace(item)); err != nil || u.Scheme != "tls" {
			t.Errorf("%s: %s: MINTGATE_NATS_URL must be tls://…", where, service)
		}
	}
	for _, name := range []string{"MINTGATE_NATS_CREDS", "MINTGATE_NATS_CA"} {
		if env[name] == "" {
			t.Errorf("%s: %s: no %s", where, service, name)
		}
	}
	if s := env["MINTGATE_GRANT_SECRET"]; usesLedger && ledger.CheckSecret([]byte(s)) != nil {
		t.Errorf("%s: %s: MINTGATE_GRANT_SECRET is %d bytes, want at least %d", where, service, len(s), ledger.MinSecretLen)
	}
}

// TestSpecEnvMatchesSpec compares specEnv with SPEC.md §5, when the shared
// folder sits beside the repository as it does on our machines; it skips
// elsewhere. It is an optional extra: the check that always runs is
// TestDeployEnvMatchesConfigurationDoc, against the repository's own
// docs/configuration.md.
func TestSpecEnvMatchesSpec(t *testing.T) {
	f, err := os.Open(filepath.Join(root(t), "..", "shared", "SPEC.md"))
	if err != nil {
		t.Skipf("SPEC.md not beside the repository: %v", err)
	}
	defer f.Close()
	names := regexp.MustCompile("`(MINTGATE_[A-Z0-9_]+)`")
	found := map[string][]string{}
	sc := bufio.NewScanner(f)
	inConfig := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inConfig = strings.HasPrefix(line, "## 5.")
			continue
		}
		cols := strings.Split(line, "|")
		if !inConfig || len(cols) < 5 {
			continue
		}
		var users []string
		for _, s := range everyService {
			if strings.Contains(cols[3], s) || strings.Contains(cols[3], "all") {
				users = append(users, s)
			}
		}
		for _, m := range names.FindAllStringSubmatch(cols[1], -1) {
			found[m[1]] = users
		}
	}
	if len(found) == 0 {
		t.Fatal("no MINTGATE_ variable found in SPEC.md §5")
	}
	for name, users := range found {
		want, ok := specEnv[name]
		if !ok {
			t.Errorf("SPEC §5 names %s, the deploy tests do not know it", name)
			continue
		}
		users = append(users, widenedBy7[name]...)
		if !sameSet(users, want) {
			t.Errorf("SPEC §5: %s is used by %v, the deploy tests say %v", name, users, want)
		}
	}
	for name := range specEnv {
		if _, ok := found[name]; !ok {
			t.Errorf("the deploy tests know %s, SPEC §5 does not", name)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestNATSConfigs: every server config we ship fsyncs each JetStream write
// (sync_interval: always, see INFRA.md on Jepsen's NATS 2.12.1 analysis),
// lets no one in without credentials (authorization.conf's users, no
// anonymous or default user), speaks TLS to clients, and the real
// nats-server accepts it, with its certificate paths moved to real files.
func TestNATSConfigs(t *testing.T) {
	confs, err := filepath.Glob(filepath.Join(root(t), "deploy", "nats", "*.conf"))
	if err != nil || len(confs) == 0 {
		t.Fatalf("no deploy/nats/*.conf (%v)", err)
	}
	bin := testenv.Binary(t, "nats-server")
	sec := devSecrets(t, "127.0.0.1")
	env := append(envFile(t, filepath.Join(sec, "nats-users.env")), "NATS_SERVER_NAME=nats-0")
	for _, conf := range confs {
		if filepath.Base(conf) == authorizationConf {
			continue // included by the others, checked by TestNATSAuthorizationFile
		}
		t.Run(filepath.Base(conf), func(t *testing.T) {
			text, err := os.ReadFile(conf)
			if err != nil {
				t.Fatal(err)
			}
			js := natsBlock(string(text), "jetstream")
			if js == "" {
				t.Fatal("no jetstream block")
			}
			if !regexp.MustCompile(`(?m)^\s*sync_interval\s*[:=]\s*"?always"?\s*$`).MatchString(js) {
				t.Errorf("the jetstream block does not set sync_interval: always:\n%s", js)
			}
			if !regexp.MustCompile(`(?m)^\s*store_dir\s*[:=]`).MatchString(js) {
				t.Errorf("the jetstream block has no store_dir: the file store would land in a temporary folder")
			}
			if !regexp.MustCompile(`(?m)^include\s+"?` + regexp.QuoteMeta(authorizationConf) + `"?\s*$`).Match(text) {
				t.Errorf("does not include %s: the server would let anyone in", authorizationConf)
			}
			for _, banned := range []string{"no_auth_user", "authorization", "accounts"} {
				if regexp.MustCompile(`(?m)^\s*` + banned + `\s*[:={]`).Match(text) {
					t.Errorf("sets %s: the users are %s's alone", banned, authorizationConf)
				}
			}
			if tls := natsBlock(string(text), "tls"); !strings.Contains(tls, "cert_file") || !strings.Contains(tls, "key_file") {
				t.Errorf("no client tls block with cert_file and key_file")
			}
			if c := natsBlock(string(text), "cluster"); c != "" && !regexp.MustCompile(`(?s)tls\s*\{.*verify:\s*true`).MatchString(c) {
				t.Errorf("cluster routes without mutual TLS (tls { … verify: true }): anyone reaching the route port joins the cluster")
			}

			// -t parses the file as the server does (unknown fields are errors,
			// and the certificate and the variables must exist) and exits.
			dir := t.TempDir()
			moved := strings.ReplaceAll(string(text), "/etc/nats/tls/", sec+"/")
			for name, body := range map[string]string{filepath.Base(conf): moved, authorizationConf: readFile(t, "deploy/nats/"+authorizationConf)} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bin, "-c", filepath.Join(dir, filepath.Base(conf)), "-t")
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("nats-server -t: %v\n%s", err, out)
			}
			// Without the users' keys the server refuses to start.
			cmd = exec.Command(bin, "-c", filepath.Join(dir, filepath.Base(conf)), "-t")
			cmd.Env = append(os.Environ(), "NATS_SERVER_NAME=nats-0")
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("nats-server -t accepts the file without NATS_*_NKEY:\n%s", out)
			}
		})
	}
}

// authorizationConf is the users file every server config includes.
const authorizationConf = "authorization.conf"

// TestNATSAuthorizationFile: one nkey user per service and one for the
// operator step (streams), each with allow lists for publish and subscribe
// (so everything else is denied), replies only on its own inbox (the
// completer also takes the signer's redelivery requests), and no
// anonymous way in. No service may change a stream: STREAM.CREATE, UPDATE
// and DELETE are the operator's, which has nothing but those and INFO.
func TestNATSAuthorizationFile(t *testing.T) {
	text := readFile(t, "deploy/nats/"+authorizationConf)
	auth := natsBlock(text, "authorization")
	if auth == "" {
		t.Fatal("no authorization block")
	}
	for _, banned := range []string{"no_auth_user", "password", "token", "user:"} {
		if strings.Contains(auth, banned) {
			t.Errorf("the authorization block has %s: only nkey users", banned)
		}
	}
	users := regexp.MustCompile(`\{\s*nkey:\s*\$NATS_([A-Z]+)_NKEY,\s*permissions:\s*\$([A-Z_]+)\s*\}`).FindAllStringSubmatch(auth, -1)
	got := map[string]string{}
	for _, u := range users {
		got[strings.ToLower(u[1])] = u[2]
	}
	for _, service := range append(slices.Clone(everyService), operatorUser) {
		perms, ok := got[service]
		if !ok {
			t.Errorf("no nkey user for %s (users: %v)", service, got)
			continue
		}
		block := natsBlock(text, perms)
		if block == "" {
			t.Errorf("%s: no %s = { … }", service, perms)
			continue
		}
		for _, dir := range []string{"publish", "subscribe"} {
			if d := natsBlock(block, dir); !strings.Contains(d, "allow") || strings.Contains(d, `">"`) {
				t.Errorf("%s: %s is not an allow list of its own subjects:\n%s", service, dir, d)
			}
		}
		// Besides its own replies, only the signer subscribes to the upload
		// events that wake its status waits (core NATS), and only the
		// completer to the signer's redelivery requests (issue 36),
		// answering each only on the requester's inbox (allow_responses).
		sub, subscribes := natsBlock(block, "subscribe"), []string{"_INBOX." + service + ".>"}
		switch service {
		case "signer":
			subscribes = append(subscribes, "mintgate.uploads.completed.>", "mintgate.uploads.rejected.>")
		case "completer":
			subscribes = append(subscribes, "mintgate.webhooks.redeliver")
			if !regexp.MustCompile(`(?m)^\s*allow_responses:\s*true\s*$`).MatchString(block) {
				t.Errorf("completer: no allow_responses: true (its redelivery answers)")
			}
		}
		if service != "completer" && strings.Contains(block, "allow_responses") {
			t.Errorf("%s: allow_responses: only the completer answers requests", service)
		}
		if got := regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(sub, -1); len(got) != len(subscribes) {
			t.Errorf("%s may subscribe to more than %q:%s", service, subscribes, sub)
		}
		for _, subject := range subscribes {
			if !strings.Contains(sub, `"`+subject+`"`) {
				t.Errorf("%s may not subscribe to %s:%s", service, subject, sub)
			}
		}
		pub := natsBlock(block, "publish")
		for _, op := range []string{"STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "CONSUMER.DELETE", "STREAM.>", "API.>"} {
			if service != operatorUser && strings.Contains(pub, "$JS.API."+op) {
				t.Errorf("%s may %s: only the operator step changes streams", service, op)
			}
		}
		if service == operatorUser {
			for _, subject := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(pub, -1) {
				if !regexp.MustCompile(`^\$JS\.API\.STREAM\.(INFO|CREATE|UPDATE)\.MINTGATE_(GRANTS|UPLOADS|WEBHOOKS)$`).MatchString(subject[1]) {
					t.Errorf("the operator step may publish %s: it needs only STREAM.INFO, CREATE and UPDATE of the three streams", subject[1])
				}
			}
		}
	}
	if len(users) != len(everyService)+1 {
		t.Errorf("%d users, want one per service and the operator step's", len(users))
	}
}

// natsBlock is the text inside "name { … }" of a NATS config, or "".
func natsBlock(text, name string) string {
	loc := regexp.MustCompile(`(?m)^\s*` + name + `\s*[:=]?\s*\{`).FindStringIndex(text)
	if loc == nil {
		return ""
	}
	depth := 1
	for i := loc[1]; i < len(text); i++ {
		switch text[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return text[loc[1]:i]
			}
		}
	}
	return ""
}

// TestDockerfile: one Dockerfile builds every service as a static, stripped
// binary on a pinned Go image, and runs it on a pinned distroless image as
// a non-root user.
func TestDockerfile(t *testing.T) {
	insts := dockerInstructions(readFile(t, "deploy/Dockerfile"))
	var froms, args, users, entrypoints, runs []string
	for _, in := range insts {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "ARG":
			args = append(args, in.args)
		case "USER":
			users = append(users, in.args)
		case "ENTRYPOINT":
			entrypoints = append(entrypoints, in.args)
		case "RUN":
			runs = append(runs, in.args)
		}
	}
	// The demo page's stage (npm: Uppy and the client package, bundled
	// from their lock files), the Go build, the image.
	if len(froms) != 3 {
		t.Fatalf("want a web stage, a build stage and a run stage, got FROM %q", froms)
	}
	if !regexp.MustCompile(`^node:\d+-bookworm-slim AS web$`).MatchString(froms[0]) {
		t.Errorf("web stage %q: want node:<major>-bookworm-slim AS web", froms[0])
	}
	web := strings.Join(runs, "\n")
	if !strings.Contains(web, "npm ci") || !strings.Contains(web, "node build.mjs") {
		t.Errorf("the web stage must install from the lock files (npm ci) and bundle the page (node build.mjs): %s", web)
	}
	if df := readFile(t, "deploy/Dockerfile"); !strings.Contains(df, "COPY --from=web /src/signer/demo/static/dist signer/demo/static/dist") {
		t.Error("the build stage does not take the demo page's bundle from the web stage: the signer would embed no page")
	}
	froms = froms[1:]
	goMinor := regexp.MustCompile(`(?m)^go (1\.\d+)`).FindStringSubmatch(readFile(t, "go.mod"))
	build := regexp.MustCompile(`^golang:(1\.\d+)\.\d+-bookworm AS build$`).FindStringSubmatch(froms[0])
	if build == nil {
		t.Errorf("build stage %q: want golang:<go.mod's version>.<patch>-bookworm AS build", froms[0])
	} else if goMinor == nil || build[1] != goMinor[1] {
		t.Errorf("build stage uses Go %s, go.mod says %v", build[1], goMinor)
	}
	if froms[1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("run stage %q: want gcr.io/distroless/static-debian12:nonroot", froms[1])
	}
	if !slices.Contains(args, "SERVICE") {
		t.Errorf("no ARG SERVICE (ARGs: %q)", args)
	}
	if len(users) == 0 || !strings.HasPrefix(users[len(users)-1], "nonroot") {
		t.Errorf("the image must end as USER nonroot, got %q", users)
	}
	if len(entrypoints) != 1 || !strings.HasPrefix(entrypoints[0], "[") {
		t.Errorf("want one exec-form ENTRYPOINT (no shell in distroless), got %q", entrypoints)
	}
	compile := ""
	for _, r := range runs {
		if strings.Contains(r, "go build") {
			compile = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`} {
		if !strings.Contains(compile, want) {
			t.Errorf("go build step lacks %s: %s", want, compile)
		}
	}
	// Every service named by SERVICE builds from its own package folder.
	built := map[string]string{}
	for _, arm := range regexp.MustCompile(`([a-z0-9|]+)\)\s*pkg="([^"]+)"`).FindAllStringSubmatch(compile, -1) {
		for service := range strings.SplitSeq(arm[1], "|") {
			built[service] = strings.ReplaceAll(arm[2], "$SERVICE", service)
		}
	}
	want := map[string]string{signer: "./signer", completer: "./completer", sweeper: "./sweeper", "s3bridge": "./deploy/s3bridge"}
	for service, pkg := range want {
		if built[service] != pkg {
			t.Errorf("SERVICE=%s builds %q, want %s", service, built[service], pkg)
		}
		if _, err := os.Stat(filepath.Join(root(t), pkg)); err != nil {
			t.Errorf("SERVICE=%s builds %s: %v", service, pkg, err)
		}
	}

	// The build context holds the sources the build needs and nothing else.
	ignore := strings.Fields(readFile(t, ".dockerignore"))
	for _, keep := range []string{"!go.mod", "!go.sum", "!signer/", "!completer/", "!sweeper/", "!shared/", "!deploy/s3bridge/", "!api/api.go", "!api/js/"} {
		if !slices.Contains(ignore, keep) {
			t.Errorf(".dockerignore does not let %s into the build context", strings.TrimPrefix(keep, "!"))
		}
	}
	if !slices.Contains(ignore, "*") {
		t.Error(".dockerignore should start from nothing (*): .git, .tools and local state stay out")
	}
	// Every Go file of the module that an image's binary is built from is
	// in the build context (api/, which the signer imports, once was not).
	kept := func(rel string) bool {
		for _, l := range ignore {
			k, ok := strings.CutPrefix(l, "!")
			if ok && (k == rel || strings.HasSuffix(k, "/") && strings.HasPrefix(rel, k)) {
				return true
			}
		}
		return false
	}
	var pkgs []string
	for _, pkg := range built {
		pkgs = append(pkgs, pkg)
	}
	slices.Sort(pkgs)
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", `{{if .Module}}{{if eq .Module.Path "github.com/mintgate/mintgate"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`}, pkgs...)...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list the images' packages: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root(t), f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rel, "signer/demo/static/dist/") {
			continue // built by the web stage, not taken from the context
		}
		if !kept(filepath.ToSlash(rel)) {
			t.Errorf(".dockerignore keeps %s out of the build context, and an image is built from it", rel)
		}
	}
}

type dockerInstruction struct{ cmd, args string }

// dockerInstructions splits a Dockerfile into instructions, joining
// continuation lines and dropping comments.
func dockerInstructions(text string) []dockerInstruction {
	var out []dockerInstruction
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		out = append(out, dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
	}
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return out
}

// hostOf is the host of a URL-valued setting, or "".
func hostOf(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
