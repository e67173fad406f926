package checks_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// configDocFile is the page listing every variable the services read.
const configDocFile = "docs/configuration.md"

// The sections of configDocFile whose names no service reads.
const (
	sectionLocal    = "The local stack and the tests"
	sectionNotAVars = "Names that are not variables"
	// sectionOperator lists the variables only the operator step
	// (deploy/streams) reads; it reads the shared NATS ones too.
	sectionOperator = "The operator step (deploy/streams)"
)

// leadingName is the MINTGATE_ name a string starts with: a literal such as
// "MINTGATE_NATS_URL: grant ledger: %w" names MINTGATE_NATS_URL.
var leadingName = regexp.MustCompile(`^MINTGATE_[A-Z0-9_]*[A-Z0-9]`)

// docEntry is one row of configDocFile.
type docEntry struct {
	section string
	readBy  []string // the services of the row; nil outside the services' sections
}

// readConfigDoc is every name configDocFile lists in the first column of a
// table, with its section and the services that read it: the "read by"
// column in the shared section, the section's own service otherwise.
func readConfigDoc(t *testing.T) map[string]docEntry {
	t.Helper()
	doc := map[string]docEntry{}
	section := ""
	row := regexp.MustCompile("^\\| `(MINTGATE_[A-Z0-9_]+)` \\|")
	for line := range strings.Lines(readFile(t, configDocFile)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := doc[m[1]]; dup {
			t.Errorf("%s lists %s twice", configDocFile, m[1])
		}
		e := docEntry{section: section}
		switch {
		case slices.Contains(everyService, section):
			e.readBy = []string{section}
		case section != sectionLocal && section != sectionNotAVars:
			cols := strings.Split(line, " | ")
			if len(cols) < 4 {
				t.Fatalf("%s: %s: no \"read by\" column in section %q", configDocFile, m[1], section)
			}
			for _, s := range append(slices.Clone(everyService), operatorUser) {
				if strings.Contains(cols[2], s) {
					e.readBy = append(e.readBy, s)
				}
			}
		}
		doc[m[1]] = e
	}
	if len(doc) == 0 {
		t.Fatalf("%s lists no MINTGATE_ variable", configDocFile)
	}
	return doc
}

// goSources parses the non-test Go files below dir, skipping the folders
// skip names (relative to the repository).
func goSources(t *testing.T, dir string, skip ...string) []*ast.File {
	t.Helper()
	var files []*ast.File
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root(t), dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root(t), path)
		if d.IsDir() && slices.Contains(skip, filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// literalNames is the MINTGATE_ names string literals below n start with.
func literalNames(n ast.Node) map[string]bool {
	names := map[string]bool{}
	ast.Inspect(n, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				if name := leadingName.FindString(s); name != "" {
					names[name] = true
				}
			}
		}
		return true
	})
	return names
}

// calledMethods is the names of the calls below n, as callNames gives them.
func calledMethods(n ast.Node, pkg string) map[string]bool {
	names := map[string]bool{}
	ast.Inspect(n, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			for _, name := range callNames(call.Fun, pkg) {
				names[name] = true
			}
		}
		return true
	})
	return names
}

// callNames is what a call of fun, in package pkg, is matched by: a method
// by its name (e.Redis() calls Redis), a function by package and name
// (tiers.ReadLimits(e), or ReadLimits(e) in package tiers, calls
// tiers.ReadLimits).
func callNames(fun ast.Expr, pkg string) []string {
	switch fun := fun.(type) {
	case *ast.SelectorExpr:
		if x, ok := fun.X.(*ast.Ident); ok {
			return []string{fun.Sel.Name, x.Name + "." + fun.Sel.Name}
		}
		return []string{fun.Sel.Name}
	case *ast.Ident:
		return []string{pkg + "." + fun.Name}
	}
	return nil
}

// envReader is the name a call of fn is known by in envMethods: a method of
// shared/config's Env by its name (e.Redis() is Redis), a function of
// shared/ that reads through a *config.Env by package and name
// (tiers.ReadLimits); "" for anything else.
func envReader(pkg string, fn *ast.FuncDecl) string {
	if fn.Recv != nil {
		if len(fn.Recv.List) != 1 || pkg != "config" {
			return ""
		}
		if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok && id.Name == "Env" {
				return fn.Name.Name
			}
		}
		return ""
	}
	for _, p := range fn.Type.Params.List {
		if star, ok := p.Type.(*ast.StarExpr); ok {
			if sel, ok := star.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Env" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "config" {
					return pkg + "." + fn.Name.Name
				}
			}
		}
	}
	return ""
}

// envMethods is, for every method of shared/config's Env and every
// function of shared/ reading through one, the MINTGATE_ names it reads:
// those in its body and those of the readers it calls (e.S3() reads
// MINTGATE_S3_BUCKET through e.S3Bucket()).
func envMethods(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reads, calls := map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, f := range goSources(t, "shared", helperDirs...) {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if name := envReader(f.Name.Name, fn); name != "" {
				reads[name] = literalNames(fn.Body)
				calls[name] = calledMethods(fn.Body, f.Name.Name)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for m, callees := range calls {
			for callee := range callees {
				for name := range reads[callee] {
					if !reads[m][name] {
						reads[m][name], changed = true, true
					}
				}
			}
		}
	}
	return reads
}

// helperDirs are the packages under shared/ that only the tests and the
// bench use (starting servers, finding their binaries): what they read is
// the local stack's, not a service's.
var helperDirs = []string{"shared/testenv", "shared/proc"}

// readByCode is, for every MINTGATE_ name in the Go sources of the services
// and shared/ (tests and test helpers aside), the services that read it: a
// service reads the names in its own folder and those of every reader of
// envMethods it calls (e.Redis() reads MINTGATE_REDIS_URL, …).
func readByCode(t *testing.T) map[string][]string {
	t.Helper()
	envMethods := envMethods(t)
	users := map[string][]string{}
	for _, f := range goSources(t, "shared", helperDirs...) {
		for name := range literalNames(f) {
			users[name] = nil
		}
	}
	for _, svc := range everyService {
		reads := map[string]bool{}
		for _, f := range goSources(t, svc) {
			for name := range literalNames(f) {
				reads[name] = true
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					for _, callee := range callNames(call.Fun, "main") {
						for name := range envMethods[callee] {
							reads[name] = true
						}
					}
				}
				return true
			})
		}
		for name := range reads {
			users[name] = append(users[name], svc)
		}
	}
	return users
}

// readByTools is the MINTGATE_ names the local stack's scripts expand
// ($NAME, ${NAME…}) and the Go test helpers and deploy tools read.
func readByTools(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	scripts, err := filepath.Glob(filepath.Join(root(t), "deploy", "local", "*.sh"))
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no deploy/local/*.sh (%v)", err)
	}
	expansion := regexp.MustCompile(`\$\{?(MINTGATE_[A-Z0-9_]*[A-Z0-9])`)
	for _, s := range scripts {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range expansion.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	for _, dir := range append(slices.Clone(helperDirs), "deploy") {
		for _, f := range goSources(t, dir) {
			for name := range literalNames(f) {
				names[name] = true
			}
		}
	}
	return names
}

// docs/configuration.md lists exactly the MINTGATE_ names the code reads,
// each with the services that read it, and exactly the names the local
// stack's scripts and the test helpers read besides.
func TestConfigurationDocMatchesCode(t *testing.T) {
	doc := readConfigDoc(t)
	code := readByCode(t)
	for name, users := range code {
		e, ok := doc[name]
		switch {
		case !ok && len(users) > 0:
			t.Errorf("%v read %s; %s does not list it", users, name, configDocFile)
		case !ok:
			t.Errorf("shared/ names %s; %s does not list it (under %q if it is no variable)", name, configDocFile, sectionNotAVars)
		case e.section == sectionNotAVars && len(users) > 0:
			t.Errorf("%s: %s is listed as no variable, but %v read it", configDocFile, name, users)
		case e.section == sectionLocal:
			t.Errorf("%s: %s is listed for the local stack only, but the services' code names it (read by %v)", configDocFile, name, users)
		case e.section != sectionNotAVars && !sameSet(e.readBy, users):
			t.Errorf("%s: %s is read by %v, the page says %v", configDocFile, name, users, e.readBy)
		}
	}
	tools := readByTools(t)
	operator := map[string]bool{}
	for _, f := range goSources(t, "deploy/streams") {
		for name := range literalNames(f) {
			operator[name] = true
		}
	}
	for name, e := range doc {
		if _, ok := code[name]; ok {
			continue
		}
		if e.section == sectionOperator && operator[name] && sameSet(e.readBy, []string{operatorUser}) {
			continue
		}
		if e.section != sectionLocal || !tools[name] {
			t.Errorf("%s lists %s (section %q), which no code reads", configDocFile, name, e.section)
		}
	}
	for name := range tools {
		if _, ok := doc[name]; !ok {
			t.Errorf("the local stack or the test helpers read %s; %s does not list it under %q", name, configDocFile, sectionLocal)
		}
	}
}

// The deploy tests' tables of who reads what (specEnv, addedEnv) agree with
// docs/configuration.md.
func TestDeployEnvMatchesConfigurationDoc(t *testing.T) {
	doc := readConfigDoc(t)
	for _, table := range []map[string][]string{specEnv, addedEnv} {
		for name, users := range table {
			e, ok := doc[name]
			if !ok {
				t.Errorf("the deploy tests know %s, %s does not", name, configDocFile)
				continue
			}
			if !sameSet(users, e.readBy) {
				t.Errorf("the deploy tests say %v read %s, %s says %v", users, name, configDocFile, e.readBy)
			}
		}
	}
}
