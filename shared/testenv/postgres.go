package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Postgres is a PostgreSQL cluster the test started: Debian's binaries
// (the postgresql package, deploy/local/tools.sh installs it), run as the
// postgres user on a free loopback port, its data and socket in a folder
// of its own that is removed when the test ends. It never touches a
// server that may run on :5432.
type Postgres struct {
	*Process
	Port int
	Dir  string // the data folder, owned by postgres
}

// PostgresBinDir is the folder of Debian's newest PostgreSQL binaries
// (/usr/lib/postgresql/<major>/bin), or "" when none is installed.
func PostgresBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

// StartPostgres initialises a cluster (initdb as the postgres user, trust
// authentication on loopback only), starts it on a free port and creates
// the database "mintgate". Stop and Start it again to simulate an outage:
// it keeps its port and its data. initdb and postgres refuse to run as
// root, hence the postgres user the package creates.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	bin := PostgresBinDir()
	if bin == "" {
		tb.Fatal("testenv: no PostgreSQL under /usr/lib/postgresql/*/bin; run deploy/local/tools.sh (it installs Debian's postgresql)")
	}
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		tb.Fatalf("testenv: the postgres user: %v (Debian's postgresql package creates it)", err)
	}
	// Not tb.TempDir(): its parents are 0700 and root's, which the
	// postgres user cannot walk through.
	base, err := os.MkdirTemp("", "mintgate-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "data")
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	if err := os.Chmod(base, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		tb.Fatal(err)
	}
	initdb := exec.Command("runuser", "-u", "postgres", "--", filepath.Join(bin, "initdb"),
		"-D", dir, "--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	port := FreePort(tb)
	// setpriv execs postgres in place (runuser would stay its parent), so
	// the PID the test stops is the postmaster's own.
	p := newProcess(tb, "/usr/bin/setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups",
		filepath.Join(bin, "postgres"), "-D", dir, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	p.Dir = base
	pg := &Postgres{Process: p, Port: port, Dir: dir}
	pg.Start()
	pg.psql(tb, "postgres", "CREATE DATABASE mintgate")
	return pg
}

// Start starts the server (again) and waits until it accepts connections.
func (pg *Postgres) Start() {
	pg.tb.Helper()
	pg.Process.Start()
	waitTCP(pg.tb, pg.Process, pg.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := pg.Wait(ctx, 30*time.Second, "postgres accepting connections", func() bool {
		out, err := exec.Command(filepath.Join(PostgresBinDir(), "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-q").CombinedOutput()
		return err == nil && len(out) == 0
	})
	if err != nil {
		pg.tb.Fatalf("testenv: %v\n%s", err, pg.Output())
	}
}

// Addr is the server's host:port.
func (pg *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port)) }

// URL is the superuser's URL of database db (the operator's; "mintgate"
// unless said).
func (pg *Postgres) URL(db string) string {
	if db == "" {
		db = "mintgate"
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", pg.Addr(), db)
}

// UserURL is the URL of role user (trust authentication: any password).
func (pg *Postgres) UserURL(user string) string {
	return fmt.Sprintf("postgres://%s:x@%s/mintgate?sslmode=disable", user, pg.Addr())
}

// SQL runs statements through psql as the superuser in database mintgate.
func (pg *Postgres) SQL(tb testing.TB, sql string) string {
	tb.Helper()
	return pg.psql(tb, "mintgate", sql)
}

func (pg *Postgres) psql(tb testing.TB, db, sql string) string {
	tb.Helper()
	cmd := exec.Command(filepath.Join(PostgresBinDir(), "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-U", "postgres", "-d", db, "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("testenv: psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}
