package records

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// GrantsSQL is deploy/postgres/grants.sql (a test keeps the two equal):
// the services' role, mintgate_service, and its rights on the rows.
//
//go:embed grants.sql
var GrantsSQL string

// Migrate is the operator's step (deploy/streams), never a service's: it
// applies the embedded migrations not applied yet to the database at url,
// one transaction each, under a session lock (two operator steps at once
// apply each migration once), then the grants of the services' role
// (GrantsSQL). url names a role that may change the schema. It is
// idempotent and returns the schema's version.
//
// A SIGKILL at any line: a migration's transaction is rolled back with the
// connection, the lock is released with the session, and the next run
// applies what is missing.
func Migrate(ctx context.Context, url string, log *slog.Logger) (int64, error) {
	db, err := openSQL(url)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("records: migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("records: migrate: %w", err)
	}
	for _, r := range results {
		log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration.String())
	}
	if _, err := db.ExecContext(ctx, GrantsSQL); err != nil {
		return 0, fmt.Errorf("records: grants of the services' role: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("records: schema version: %w", err)
	}
	return v, nil
}

// SchemaVersion is the newest embedded migration: what Migrate brings a
// database to.
func SchemaVersion() int64 {
	ents, _ := fs.ReadDir(migrations, "migrations")
	return int64(len(ents))
}

func openSQL(url string) (*sql.DB, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg.ConnConfig), nil
}
