package dial_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mintgate/mintgate/shared/config"
	"github.com/mintgate/mintgate/shared/dial"
	"github.com/mintgate/mintgate/shared/testenv"
)

// connect dials with the options MINTGATE_NATS_* give the service.
func connect(t *testing.T, env map[string]string) (*nats.Conn, error) {
	t.Helper()
	e := config.New(func(k string) string { return env[k] })
	n := e.NATS()
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	opts, err := dial.NATSOptions(n, "signer")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(n.URL, append(opts, nats.MaxReconnects(0))...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

func write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func seed(t *testing.T, kp nkeys.KeyPair) []byte {
	t.Helper()
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func public(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startNATS runs nats-server with the given config lines on a free port.
func startNATS(t *testing.T, lines string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	conf := write(t, "nats.conf", []byte(fmt.Sprintf("listen: %q\n%s\n", addr, lines)))
	testenv.StartNATSConfig(t, conf, addr, nil)
	return "nats://" + addr
}

// MINTGATE_NATS_CREDS with a bare nkey seed (an nkey user of the server's
// authorization block, as deploy/nats ships), user:password in the URL,
// and no credentials at all against a server that wants them.
func TestNATSNkeySeedAndPassword(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	url := startNATS(t, fmt.Sprintf(`authorization { users: [ {nkey: %s}, {user: alice, password: "s3cret-pass"} ] }`, public(t, user)))
	creds := write(t, "signer.nk", seed(t, user))
	host := strings.TrimPrefix(url, "nats://")

	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": url, "MINTGATE_NATS_CREDS": creds}); err != nil {
		t.Errorf("nkey seed: %v", err)
	}
	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": "nats://alice:s3cret-pass@" + host}); err != nil {
		t.Errorf("user and password in the URL: %v", err)
	}
	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": "nats://alice:wrong@" + host}); err == nil {
		t.Error("a wrong password connected")
	}
	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": url}); err == nil {
		t.Error("connected without credentials")
	}
	other, _ := nkeys.CreateUser()
	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": url, "MINTGATE_NATS_CREDS": write(t, "other.nk", seed(t, other))}); err == nil {
		t.Error("an unknown nkey connected")
	}
}

// MINTGATE_NATS_CREDS with a .creds file (user JWT and seed) against a
// server in operator mode, the form nsc and managed NATS hand out.
func TestNATSCredsFileInOperatorMode(t *testing.T) {
	okp, _ := nkeys.CreateOperator()
	akp, _ := nkeys.CreateAccount()
	ukp, _ := nkeys.CreateUser()
	oc := jwt.NewOperatorClaims(public(t, okp))
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(public(t, akp))
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	uc := jwt.NewUserClaims(public(t, ukp))
	uc.IssuerAccount = public(t, akp)
	ujwt, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	credsFile, err := jwt.FormatUserConfig(ujwt, seed(t, ukp))
	if err != nil {
		t.Fatal(err)
	}
	url := startNATS(t, fmt.Sprintf("operator: %s\nresolver: MEMORY\nresolver_preload: { %s: %s }\n", ojwt, public(t, akp), ajwt))

	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": url, "MINTGATE_NATS_CREDS": write(t, "signer.creds", credsFile)}); err != nil {
		t.Errorf(".creds file: %v", err)
	}
	if _, err := connect(t, map[string]string{"MINTGATE_NATS_URL": url}); err == nil {
		t.Error("connected without credentials")
	}
}

// Bad values stop the service at start naming the variable, and never
// print a password or a file's secret.
func TestNATSBadValues(t *testing.T) {
	acct, _ := nkeys.CreateAccount()
	dir := t.TempDir()
	cases := []struct {
		name, variable string
		env            map[string]string
	}{
		{"scheme", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "http://u:hunter2@nats:4222"}},
		{"one of a list", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "tls://a:4222,redis://u:hunter2@b"}},
		{"no host", "MINTGATE_NATS_URL", map[string]string{"MINTGATE_NATS_URL": "hunter2"}},
		{"creds missing", "MINTGATE_NATS_CREDS", map[string]string{"MINTGATE_NATS_CREDS": filepath.Join(dir, "none.creds")}},
		{"creds not a key", "MINTGATE_NATS_CREDS", map[string]string{"MINTGATE_NATS_CREDS": write(t, "x.creds", []byte("hunter2\n"))}},
		{"account seed", "MINTGATE_NATS_CREDS", map[string]string{"MINTGATE_NATS_CREDS": write(t, "a.nk", seed(t, acct))}},
		{"ca missing", "MINTGATE_NATS_CA", map[string]string{"MINTGATE_NATS_CA": filepath.Join(dir, "none.crt")}},
		{"ca not PEM", "MINTGATE_NATS_CA", map[string]string{"MINTGATE_NATS_CA": write(t, "ca.crt", []byte("hunter2"))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := config.New(func(k string) string { return tc.env[k] })
			n := e.NATS()
			err := e.Err()
			if err == nil {
				_, err = dial.NATSOptions(n, "signer")
			}
			if err == nil || !strings.Contains(err.Error(), tc.variable) {
				t.Fatalf("%v; want an error naming %s", err, tc.variable)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), string(seed(t, acct))) {
				t.Errorf("the error prints a secret: %v", err)
			}
		})
	}
}
