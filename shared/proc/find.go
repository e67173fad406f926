package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module is the services' module: the repository's root holds its go.mod.
// The test modules in it (integration, deploy/checks) have their own.
const Module = "github.com/mintgate/mintgate"

// Root is the repository's root folder: the nearest folder at or above the
// working directory whose go.mod is the services' module.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == Module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", Module)
		}
		dir = parent
	}
}

// modulePath is the path a go.mod's module line declares.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// ErrNoBinary is Binary's error when name is nowhere it looks.
var ErrNoBinary = errors.New("not found in $MINTGATE_TOOLS/bin, .tools/bin or PATH")

// Binary finds a server binary where the repo's scripts install it:
// $MINTGATE_TOOLS/bin (getenv reads the variable), then the repository's
// git-ignored .tools/bin (when root is not empty), then PATH.
func Binary(getenv func(string) string, root, name string) (string, error) {
	var dirs []string
	if d := getenv("MINTGATE_TOOLS"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if root != "" {
		dirs = append(dirs, filepath.Join(root, ".tools", "bin"))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s %w", name, ErrNoBinary)
	}
	return p, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
