package records_test

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mintgate/mintgate/shared/records"
	"github.com/mintgate/mintgate/shared/testenv"
)

// pgExec runs sql through psql as role user; its output and error.
func pgExec(pg *testenv.Postgres, user, sql string) (string, error) {
	out, err := exec.Command(filepath.Join(testenv.PostgresBinDir(), "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-U", user, "-d", "mintgate", "-c", sql).CombinedOutput()
	return string(out), err
}

// pgQuery is one value of a query as the Store's role.
func pgQuery(t *testing.T, st *records.Store, sql string) string {
	t.Helper()
	v, err := st.QueryValue(t.Context(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
