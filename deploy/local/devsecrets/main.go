// Command devsecrets writes the throwaway secrets of a development stack into
// one folder, creating only what is missing, so a restarted stack keeps its
// secrets (and the grants sealed with them stay valid):
//
//	ca.crt               the CA that signed tls.crt (its key is never written:
//	                     nothing else can ever be signed by it)
//	tls.crt, tls.key     a server certificate for -hosts, used by Redis and NATS
//	                     (the names cert-manager gives them in a Secret)
//	nats-<user>.nk       the nkey seed of each NATS user (MINTGATE_NATS_CREDS):
//	                     signer, sweeper, completer, and streams (the operator
//	                     step, deploy/streams)
//	nats-users.env       NATS_<USER>_NKEY=<public key> for nats-server's
//	                     deploy/nats/authorization.conf
//	redis-password       the password of the Redis ACL user mintgate
//	redis-admin-password the password of the Redis ACL user admin
//	redis-users.acl      -redis-acl without its comments, with those
//	                     passwords' SHA-256
//	grant-secret         MINTGATE_GRANT_SECRET: 32 random bytes, hex
//	webhook-secret       MINTGATE_WEBHOOK_SECRET: whsec_ and 32 random bytes in
//	                     base64, as Standard Webhooks writes a secret (the
//	                     local webhook receiver verifies with it too)
//
// The certificate is renewed when it expires within 30 days or does not
// cover -hosts. The local stack (deploy/local/up.sh) runs it at each start;
// the compose stack's committed dev-only copy was made by it too.
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// natsUsers are the NATS users of deploy/nats/authorization.conf: the
// three services and the operator step that creates the streams.
var natsUsers = []string{"signer", "sweeper", "completer", "streams"}

// The placeholders of the Redis ACL template, replaced by the SHA-256 of
// each user's password in hex (the ACL file's #<hash> form).
const (
	mintgatePlaceholder = "@MINTGATE_PASSWORD_SHA256@"
	adminPlaceholder    = "@ADMIN_PASSWORD_SHA256@"
)

// renewBefore is how long before its expiry a certificate is replaced.
const renewBefore = 30 * 24 * time.Hour

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "devsecrets:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fl.String("dir", "", "the folder to write into (created if missing)")
	hosts := fl.String("hosts", "127.0.0.1,localhost", "comma-separated names and addresses the server certificate is for")
	days := fl.Int("days", 365, "how long a new certificate is valid")
	acl := fl.String("redis-acl", "", "the Redis ACL template (deploy/redis/users.acl) to render into redis-users.acl")
	if err := fl.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	s := secrets{dir: *dir}
	if err := s.certificate(strings.Split(*hosts, ","), time.Duration(*days)*24*time.Hour); err != nil {
		return err
	}
	if err := s.nkeys(); err != nil {
		return err
	}
	password, err := s.random("redis-password", 32)
	if err != nil {
		return err
	}
	admin, err := s.random("redis-admin-password", 32)
	if err != nil {
		return err
	}
	if *acl != "" {
		if err := s.redisACL(*acl, map[string]string{mintgatePlaceholder: password, adminPlaceholder: admin}); err != nil {
			return err
		}
	}
	if _, err := s.random("grant-secret", 32); err != nil {
		return err
	}
	_, err = s.randomAs("webhook-secret", 32, func(b []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(b) })
	return err
}

type secrets struct{ dir string }

func (s secrets) path(name string) string { return filepath.Join(s.dir, name) }

// random is the file's content, after writing n random bytes in hex to it
// if it did not exist.
func (s secrets) random(name string, n int) (string, error) {
	return s.randomAs(name, n, hex.EncodeToString)
}

// randomAs is the file's content, after writing n random bytes encoded by
// encode to it if it did not exist.
func (s secrets) randomAs(name string, n int, encode func([]byte) string) (string, error) {
	if b, err := os.ReadFile(s.path(name)); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	v := encode(randomBytes(n))
	return v, os.WriteFile(s.path(name), []byte(v+"\n"), 0o600)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// nkeys writes a seed per NATS user that has none, and the public keys of
// all of them to nats-users.env.
func (s secrets) nkeys() error {
	var env strings.Builder
	for _, user := range natsUsers {
		file := s.path("nats-" + user + ".nk")
		seed, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return err
			}
			if seed, err = kp.Seed(); err != nil {
				return err
			}
			if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		kp, err := nkeys.ParseDecoratedNKey(seed)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		fmt.Fprintf(&env, "NATS_%s_NKEY=%s\n", strings.ToUpper(user), pub)
	}
	return os.WriteFile(s.path("nats-users.env"), []byte(env.String()), 0o644)
}

// redisACL renders the template: its comment lines go (an aclfile has
// none), each placeholder becomes the hash of its password.
func (s secrets) redisACL(template string, passwords map[string]string) error {
	raw, err := os.ReadFile(template)
	if err != nil {
		return err
	}
	var t []byte
	for line := range bytes.Lines(raw) {
		if !bytes.HasPrefix(line, []byte("#")) {
			t = append(t, line...)
		}
	}
	for placeholder, password := range passwords {
		if !bytes.Contains(t, []byte(placeholder)) {
			return fmt.Errorf("%s has no %s to replace", template, placeholder)
		}
		sum := sha256.Sum256([]byte(password))
		t = bytes.ReplaceAll(t, []byte(placeholder), []byte(hex.EncodeToString(sum[:])))
	}
	return os.WriteFile(s.path("redis-users.acl"), t, 0o600)
}

// certificate writes a new CA and server certificate unless tls.crt is
// still good for hosts.
func (s secrets) certificate(hosts []string, validity time.Duration) error {
	if b, err := os.ReadFile(s.path("tls.crt")); err == nil && covers(b, hosts) {
		return nil
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "mintgate development CA " + now.UTC().Format(time.DateOnly)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := leafTemplate(hosts, now, validity)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
		mode      os.FileMode
	}{
		{"ca.crt", "CERTIFICATE", caDER, 0o644},
		{"tls.key", "PRIVATE KEY", keyDER, 0o600},
		{"tls.crt", "CERTIFICATE", leafDER, 0o644},
	} {
		if err := os.WriteFile(s.path(f.name), pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return err
		}
	}
	return nil
}

// leafTemplate is the server certificate for hosts (names or addresses).
func leafTemplate(hosts []string, now time.Time, validity time.Duration) *x509.Certificate {
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client auth too: NATS cluster routes present it to each other.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	return leaf
}

// covers reports whether the PEM certificate is valid for every host for
// longer than renewBefore.
func covers(certPEM []byte, hosts []string) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil || time.Until(c.NotAfter) < renewBefore {
		return false
	}
	return !slices.ContainsFunc(hosts, func(h string) bool { return c.VerifyHostname(h) != nil })
}

func serial() *big.Int { return new(big.Int).SetBytes(randomBytes(16)) }
