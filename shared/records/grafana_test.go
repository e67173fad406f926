package records_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/testenv"
)

// TestGrafanaQueriesRun: the dashboard's PostgreSQL panel and the alert
// rule's query run on the real schema and find a tenant at its ceiling.
func TestGrafanaQueriesRun(t *testing.T) {
	root, err := testenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct {
				RawSQL string `json:"rawSql"`
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "mintgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.RawSQL != "" {
				queries = append(queries, strings.ReplaceAll(tg.RawSQL, "$__timeFilter(minute)", "minute >= now() - interval '6 hours'"))
			}
		}
	}
	alerts, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "alerts-records.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)rawSql: \|\n(.*?)\n          - refId: B`).FindSubmatch(alerts)
	if m == nil || len(queries) == 0 {
		t.Fatalf("found %d panel queries and %v alert query", len(queries), m != nil)
	}
	queries = append(queries, string(m[1]))
	pg, st := startDB(t)
	minute := time.Now().UTC().Truncate(time.Minute)
	if err := st.AddTally(t.Context(), records.Tally{ID: "s/1", Minute: minute, Tenants: map[string]records.Tick{"acme": {Signs: 4, RefusedTenant: 2}}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		if out := pg.SQL(t, q); !strings.Contains(out, "acme") {
			t.Errorf("%s\nanswered %q, want the tenant acme", q, out)
		}
	}
}
