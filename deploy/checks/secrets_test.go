package checks_test

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/testenv"
)

// devSecrets writes a development stack's secrets (deploy/local/devsecrets:
// a CA and a certificate for hosts, the NATS users' nkeys, Redis passwords
// and the rendered ACL) into a fresh folder.
func devSecrets(t *testing.T, hosts string) string {
	t.Helper()
	dir := t.TempDir()
	bin := testenv.BuildCommand(t, "./deploy/local/devsecrets")
	out, err := runCmd(bin, "-dir", dir, "-hosts", hosts, "-redis-acl", filepath.Join(root(t), "deploy", "redis", "users.acl"))
	if err != nil {
		t.Fatalf("devsecrets: %v\n%s", err, out)
	}
	return dir
}

// envFile reads KEY=value lines.
func envFile(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			env = append(env, line)
		}
	}
	return env
}

// TestDevSecrets: a second run keeps every secret (the local stack reuses
// them across restarts), the certificate is signed by ca.crt for the hosts
// asked, and the keys are readable by their owner only.
func TestDevSecrets(t *testing.T) {
	dir := devSecrets(t, "127.0.0.1")
	before := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		before[filepath.Base(f)], _ = os.ReadFile(f)
	}
	for _, name := range []string{"ca.crt", "tls.crt", "tls.key", "nats-signer.nk", "nats-sweeper.nk", "nats-completer.nk", "nats-streams.nk",
		"nats-users.env", "redis-password", "redis-admin-password", "redis-users.acl", "grant-secret", "webhook-secret"} {
		if _, ok := before[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if s := strings.TrimSpace(string(before["grant-secret"])); len(s) < 64 {
		t.Errorf("grant-secret is %d characters, want 32 random bytes in hex", len(s))
	}
	// A Standard Webhooks secret, as the local webhook receiver's library
	// and the completer read it.
	if s, ok := strings.CutPrefix(strings.TrimSpace(string(before["webhook-secret"])), "whsec_"); !ok {
		t.Errorf("webhook-secret does not start with whsec_")
	} else if key, err := base64.StdEncoding.DecodeString(s); err != nil || len(key) != 32 {
		t.Errorf("webhook-secret is not whsec_ and 32 random bytes in base64 (%d bytes, %v)", len(key), err)
	}
	if bytes.Contains(before["redis-users.acl"], []byte("#@")) || bytes.Contains(before["redis-users.acl"], before["redis-password"][:10]) {
		t.Errorf("redis-users.acl: a placeholder left, or a password in clear:\n%s", before["redis-users.acl"])
	}
	for _, name := range []string{"tls.key", "nats-signer.nk", "redis-password", "grant-secret", "webhook-secret"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}

	bin := testenv.BuildCommand(t, "./deploy/local/devsecrets")
	if out, err := runCmd(bin, "-dir", dir, "-hosts", "127.0.0.1", "-redis-acl", filepath.Join(root(t), "deploy", "redis", "users.acl")); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	for name, b := range before {
		if after, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(after, b) {
			t.Errorf("a second run changed %s", name)
		}
	}

	// A new host renews the certificate; the keys stay.
	if out, err := runCmd(bin, "-dir", dir, "-hosts", "127.0.0.1,nats"); err != nil {
		t.Fatalf("third run: %v\n%s", err, out)
	}
	cert := verifyCert(t, dir, "nats")
	if time.Until(cert.NotAfter) < 300*24*time.Hour {
		t.Errorf("certificate expires %v", cert.NotAfter)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "nats-signer.nk")); !bytes.Equal(after, before["nats-signer.nk"]) {
		t.Error("renewing the certificate changed a NATS key")
	}
}

// verifyCert checks that dir's tls.crt is signed by its ca.crt for host,
// and returns it.
func verifyCert(t *testing.T, dir, host string) *x509.Certificate {
	t.Helper()
	read := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s: no PEM", name)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(read("ca.crt"))
	cert := read("tls.crt")
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
		t.Errorf("%s/tls.crt for %s: %v", dir, host, err)
	}
	return cert
}

func runCmd(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}
