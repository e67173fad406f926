package checks

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	promql "github.com/prometheus/prometheus/promql/parser"
)

// futureMetrics are queried by the dashboard before any service exports
// them (a metric being added on another branch). Remove a name once its
// service exports it (the test then finds it in the code).
var futureMetrics = []string{}

// TestMonitoringQueriesExportedMetrics parses deploy/prometheus/alerts.yml
// with Prometheus's own rule parser and every query of
// deploy/grafana/mintgate.json with its PromQL parser, and checks that
// each metric they read is one a service exports: a metric declared in
// the services' code (prometheus.*Opts{Name: …}), with a histogram's
// _bucket, _sum and _count series, or a name in futureMetrics.
func TestMonitoringQueriesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	for _, want := range []string{"mintgate_signer_signs_total", "mintgate_sweeper_lateness_seconds", "mintgate_completer_lag_seconds"} {
		if !exported[want] {
			t.Fatalf("%s not found in the services' code: the scan is broken (found %d names)", want, len(exported))
		}
	}
	for _, f := range futureMetrics {
		if exported[f] {
			t.Errorf("%s is exported now: remove it from futureMetrics", f)
		}
		exported[f] = true
	}
	p := promql.NewParser(promql.Options{})

	queries := map[string]string{} // where → expression
	groups, errs := rulefmt.ParseFile(filepath.Join("prometheus", "alerts.yml"), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("alerts.yml: %v", err)
	}
	if groups != nil {
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					t.Errorf("alerts.yml: a rule of group %s is not an alert", g.Name)
				}
				queries["alert "+r.Alert] = r.Expr
			}
		}
	}
	alerts := len(queries)
	for _, a := range []string{"MintgateLedgerUnavailable", "MintgateRefundLatenessHigh", "MintgateDLQNotEmpty", "MintgateTenantPinnedAtCeiling"} {
		if _, ok := queries["alert "+a]; !ok {
			t.Errorf("alerts.yml has no alert %s", a)
		}
	}

	for where, expr := range dashboardQueries(t) {
		queries[where] = expr
	}
	if len(queries)-alerts < 8 {
		t.Errorf("%d dashboard queries, want every panel's", len(queries)-alerts)
	}
	// Grafana's variables are not PromQL; stand in durations.
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m")
	for where, q := range queries {
		expr, err := p.ParseExpr(grafanaVars.Replace(q))
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
			vs, ok := n.(*promql.VectorSelector)
			if !ok {
				return nil
			}
			if vs.Name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, vs)
			} else if !exported[vs.Name] {
				t.Errorf("%s: %s is not a metric any service exports", where, vs.Name)
			}
			return nil
		})
	}
}

// dashboardQueries are the expressions of every panel's targets, by panel
// title and refId.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "mintgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID  string `json:"refId"`
				Expr   string `json:"expr"`
				RawSQL string `json:"rawSql"` // a PostgreSQL panel's (the upload records): checked by shared/records
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("mintgate.json: %v", err)
	}
	qs := map[string]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RawSQL != "" {
				continue
			}
			qs["panel "+strconv.Quote(p.Title)+" "+tg.RefID] = tg.Expr
		}
	}
	return qs
}

// exportedMetrics is every metric name the services' code declares in a
// prometheus.*Opts literal (CounterOpts, GaugeOpts, HistogramOpts, …),
// with a histogram's series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"signer", "sweeper", "completer", "shared"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := lit.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, el := range lit.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil {
						continue
					}
					if slices.Contains([]string{"Namespace", "Subsystem"}, key.Name) {
						t.Errorf("%s: %s in a metric's options: this scan reads whole names only", fset.Position(kv.Pos()), key.Name)
					}
					val, ok := kv.Value.(*ast.BasicLit)
					if key.Name != "Name" || !ok || val.Kind != token.STRING {
						continue
					}
					name, _ := strconv.Unquote(val.Value)
					names[name] = true
					if sel.Sel.Name == "HistogramOpts" {
						for _, s := range []string{"_bucket", "_sum", "_count"} {
							names[name+s] = true
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}
