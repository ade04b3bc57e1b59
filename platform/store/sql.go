package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations
var migrations embed.FS

// SQLiteFile is the database file Open creates in a data directory.
const SQLiteFile = "sluice.db"

// Open connects to the database named by dsn and applies pending
// migrations. dsn is a postgres:// (or postgresql://) URL, or the path of a
// SQLite file (created with its directory when missing).
func Open(ctx context.Context, dsn string, logger *slog.Logger) (Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var s *sqlStore
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s, err = openPostgres(dsn)
	} else {
		s, err = openSQLite(dsn)
	}
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx, logger); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// sqlStore implements Store over database/sql. writer and reader are the
// same pool on PostgreSQL; on SQLite writer has one connection (writes are
// serialised in Go, never SQLITE_BUSY) and reader several (WAL readers see
// a snapshot and never block the writer).
type sqlStore struct {
	dialect string
	writer  *sql.DB
	reader  *sql.DB
	readTx  *sql.TxOptions
	// deleteBatch is DeleteUsageBefore's batch on SQLite.
	deleteBatch int
}

func openSQLite(path string) (*sqlStore, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	// The writer's page cache is 32 MiB (SQLite's default is 2 MiB): a
	// usage batch touches the pages of the records' indexes and of four
	// rollup tables, which then stay cached instead of being read again.
	w, err := sql.Open("sqlite", base+"&_txlock=immediate&_pragma=cache_size(-32768)")
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	w.SetMaxOpenConns(1)
	r, err := sql.Open("sqlite", base)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	r.SetMaxOpenConns(4)
	// The file holds sealed keys and key hashes: owner only.
	if err := w.Ping(); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("store: opening %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	return &sqlStore{dialect: "sqlite", writer: w, reader: r, deleteBatch: defaultDeleteBatch}, nil
}

func openPostgres(dsn string) (*sqlStore, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db.SetMaxOpenConns(16)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connecting to PostgreSQL: %w", err)
	}
	return &sqlStore{dialect: "postgres", writer: db, reader: db,
		readTx: &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}}, nil
}

func (s *sqlStore) migrate(ctx context.Context, logger *slog.Logger) error {
	p, err := s.provider(logger)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("store: applying migrations: %w", err)
	}
	return nil
}

// provider is the goose provider of s's migrations (logger nil: goose's
// default).
func (s *sqlStore) provider(logger *slog.Logger) (*goose.Provider, error) {
	sub, err := fs.Sub(migrations, "migrations/"+s.dialect)
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	dialect := goose.DialectSQLite3
	if s.dialect == "postgres" {
		dialect = goose.DialectPostgres
		// Platform replicas starting together migrate one at a time.
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(dialect, s.writer, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	return p, nil
}

func (s *sqlStore) Dialect() string { return s.dialect }

func (s *sqlStore) Close() error {
	err := s.writer.Close()
	if s.reader != s.writer {
		err = errors.Join(err, s.reader.Close())
	}
	return err
}

func (s *sqlStore) Read(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, s.reader, s.readTx, fn)
}

func (s *sqlStore) Write(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, s.writer, nil, fn)
}

func (s *sqlStore) run(ctx context.Context, db *sql.DB, opts *sql.TxOptions, fn func(Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(&sqlTx{tx: tx, dialect: s.dialect}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// isUnique reports whether err is a unique-constraint violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}
