// Package checks tests what deploy/ ships (the Dockerfile, the manifests,
// the server configs, the local stack's scripts) by parsing it. It is a
// module of its own so that the parsers it needs (Prometheus's, HCL,
// compose-go) stay out of the services' go.mod.
package checks

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests from deploy/, the folder they check, whose paths
// they name relative to it.
func TestMain(m *testing.M) {
	if err := os.Chdir(".."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
