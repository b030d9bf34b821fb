package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/postgres"
	"github.com/limenhq/limen/gateway/store/sqlite"
)

// addDatabaseFlags adds the shared store's flags: without --database-url
// the stores are SQLite files in --data-dir.
func addDatabaseFlags(f *pflag.FlagSet) {
	f.String("database-url", "", "PostgreSQL database shared by several proxies (postgres://USER@HOST:PORT/DB?sslmode=verify-full) "+
		"for users, bots, join tokens, locks, the audit trail, console sign-ins, the policy revision floor and the session directory; "+
		"needs --ca-dir; default: SQLite files in --data-dir")
	f.String("database-password-file", "", "file holding the database password (a mounted Secret), instead of a password in --database-url")
	f.Duration("lock-stale-after", locks.DefaultStaleAfter, "longest time the proxy trusts its copy of the locks without confirming it against the store "+
		"(re-read every second and on every change another proxy announces); past it --lock-mode applies")
	f.String("lock-mode", string(locks.ModeStrict), "what the proxy does once its lock view is older than --lock-stale-after: "+
		"strict refuses every request with 503 and ends every open stream until the store answers again (a lock set through another proxy "+
		"is never missed); best-effort keeps serving on the last view and logs it")
}

// lockViewConfig is the validated --lock-stale-after and --lock-mode.
type lockViewConfig struct {
	StaleAfter time.Duration
	Mode       locks.Mode
}

func loadLockViewConfig(v *viper.Viper) (lockViewConfig, error) {
	c := lockViewConfig{StaleAfter: v.GetDuration("lock-stale-after")}
	if min := 2 * adminapi.LockSyncInterval; c.StaleAfter < min {
		return c, fmt.Errorf("lock-stale-after: %s is too short: the proxy re-reads its locks every %s, so use at least %s (default %s)",
			c.StaleAfter, adminapi.LockSyncInterval, min, locks.DefaultStaleAfter)
	}
	m, err := locks.ParseMode(v.GetString("lock-mode"))
	if err != nil {
		return c, fmt.Errorf("lock-mode: %w", err)
	}
	c.Mode = m
	return c, nil
}

// databaseConfig is the validated --database-url and its password file;
// a zero value means SQLite in the data directory.
type databaseConfig struct {
	URL, PasswordFile string
}

func loadDatabaseConfig(v *viper.Viper) (databaseConfig, error) {
	c := databaseConfig{URL: v.GetString("database-url"), PasswordFile: v.GetString("database-password-file")}
	if c.URL == "" {
		if c.PasswordFile != "" {
			return c, errors.New("database-password-file: set only with database-url (without it the stores are SQLite files in data-dir)")
		}
		return c, nil
	}
	// The URL may hold a password: no message repeats it.
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return c, errors.New("database-url: want postgres://USER@HOST:PORT/DATABASE (with ?sslmode=verify-full off the host; the password in database-password-file)")
	}
	if u.Path == "" || u.Path == "/" {
		return c, errors.New("database-url: name the database, postgres://USER@HOST:PORT/DATABASE")
	}
	return c, nil
}

// backend opens the configured store: the PostgreSQL database (migrated
// at open), or the SQLite files in dataDir.
func (c databaseConfig) backend(ctx context.Context, dataDir string) (store.Backend, error) {
	if c.URL == "" {
		return sqlite.New(dataDir), nil
	}
	b, err := postgres.Open(ctx, postgres.Config{URL: c.URL, PasswordFile: c.PasswordFile})
	if err != nil {
		return nil, fmt.Errorf("database-url: %w", err)
	}
	return b, nil
}
