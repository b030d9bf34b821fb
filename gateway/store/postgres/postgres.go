// Package postgres is the shared engine of gateway/store: one PostgreSQL
// database (through jackc/pgx/v5) that several proxies use at once, so
// that they agree on users, bots, tokens, locks and the audit trail.
//
// The schema is versioned per domain in the table limen_schema. Open
// migrates every domain under a session-level advisory lock, so proxies
// starting together apply each migration once, and refuses a database a
// newer Limen migrated (store.ErrSchemaNewer).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limenhq/limen/gateway/store"
)

// Advisory lock keys ("limen" and a number), in one place so that no two
// uses share one.
const (
	migrateLock int64 = 0x6c696d656e01 // schema migrations, held for the whole Open
	auditLock   int64 = 0x6c696d656e02 // audit commits: sequence order is commit order
)

// Config says how to reach the database.
type Config struct {
	// URL is a postgres:// URL (or a libpq key=value string).
	URL string
	// PasswordFile, if set, holds the password (a mounted Secret); it
	// replaces any password in URL. Trailing newlines are ignored.
	PasswordFile string
	// MaxConns bounds the pool; 0 is pgxpool's default (max(4, CPUs)).
	MaxConns int32
}

// Backend is one database's pool; every domain shares it.
type Backend struct {
	pool *pgxpool.Pool
	// where names the database in messages, without the password.
	where string
}

var _ store.Backend = (*Backend)(nil)

// DefaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout: an unreachable database must turn into a 503 quickly,
// not hold requests.
const DefaultConnectTimeout = 5 * time.Second

// Open connects, migrates every domain and returns the Backend.
func Open(ctx context.Context, c Config) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		// pgx's message quotes the URL, password included: say only what
		// is wrong.
		why := "cannot be parsed"
		if inner := errors.Unwrap(err); inner != nil {
			why = inner.Error()
		}
		return nil, fmt.Errorf("database-url: not a PostgreSQL URL (postgres://USER@HOST:PORT/DB?sslmode=...): %s", why)
	}
	if c.PasswordFile != "" {
		pw, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("database-password-file: %w", err)
		}
		cfg.ConnConfig.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxConns > 0 {
		cfg.MaxConns = c.MaxConns
	}
	b := &Backend{where: fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)}
	if b.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("database %s: %w", b.where, err)
	}
	if err := b.migrate(ctx); err != nil {
		b.pool.Close()
		return nil, err
	}
	return b, nil
}

// Engine is "postgres".
func (b *Backend) Engine() string { return "postgres" }

// Where names the database (user, host, port, name; never the password).
func (b *Backend) Where() string { return b.where }

// Close closes the pool.
func (b *Backend) Close() error {
	b.pool.Close()
	return nil
}

// Ping checks the database answers (readiness).
func (b *Backend) Ping(ctx context.Context) error { return b.pool.Ping(ctx) }

func (b *Backend) Users(context.Context) (store.Users, error)   { return users{b.pool}, nil }
func (b *Backend) Bots(context.Context) (store.Bots, error)     { return bots{b.pool}, nil }
func (b *Backend) Tokens(context.Context) (store.Tokens, error) { return tokens{b.pool}, nil }
func (b *Backend) Locks(context.Context) (store.Locks, error)   { return locks{b.pool}, nil }

// Audit returns the audit driver; readOnly changes nothing here (the
// audit package refuses writes on a read-only store).
func (b *Backend) Audit(context.Context, bool) (store.Audit, error) {
	return &auditDB{pool: b.pool, where: b.where}, nil
}

// domains are every domain's migrations, in the order they are applied.
var domains = []struct {
	name       string
	migrations []store.Migration
}{
	{"users", usersMigrations},
	{"bots", botsMigrations},
	{"tokens", tokensMigrations},
	{"locks", locksMigrations},
	{"audit", auditMigrations},
	{"signins", signinsMigrations},
	{"policy", policyMigrations},
	{"sessions", sessionsMigrations},
	{"peers", peersMigrations},
	{"replays", replaysMigrations},
	{"export", exportMigrations},
	{"requests", requestsMigrations},
}

// migrate applies the missing migrations of every domain while holding
// the migration lock on one connection: a second proxy starting at the
// same time waits for it, then finds the work done.
func (b *Backend) migrate(ctx context.Context) error {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("database %s: %w", b.where, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		return fmt.Errorf("database %s: take the migration lock: %w", b.where, err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrateLock) //nolint:errcheck // the session ends the lock too
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS limen_schema (
		domain text PRIMARY KEY, version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("database %s: create limen_schema: %w", b.where, err)
	}
	for _, d := range domains {
		var have int
		err := conn.QueryRow(ctx, "SELECT version FROM limen_schema WHERE domain = $1", d.name).Scan(&have)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("database %s: read the %s schema version: %w", b.where, d.name, err)
		}
		if err := store.CheckVersion("database "+b.where, d.name, have, d.migrations); err != nil {
			return err
		}
		for _, m := range d.migrations[have:] {
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.SQL); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO limen_schema (domain, version) VALUES ($1, $2)
					ON CONFLICT (domain) DO UPDATE SET version = excluded.version, migrated_at = now()`, d.name, m.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("database %s: migrate the %s schema to version %d: %w", b.where, d.name, m.Version, err)
			}
		}
	}
	return nil
}

// Postgres error codes the drivers map.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// affected turns "no row changed" into store.ErrNotFound.
func affected(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}
