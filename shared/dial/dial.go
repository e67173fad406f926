// Package dial builds the clients a service talks to its servers with —
// Redis, NATS, AWS — from the settings shared/config has read and checked.
// It is the only package between config and those SDKs, so a package that
// only reads configuration (the service skeleton, ops) links none of them.
package dial

import (
	"crypto/x509"
	"fmt"
	"os"
)

// readCA is the pool of the PEM certificates in the file at path.
func readCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
