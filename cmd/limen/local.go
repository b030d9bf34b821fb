package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"

	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/store"
)

// The --local commands work on the proxy host, straight in the proxy's data
// directory, with no certificate and no policy: how the first admin is made,
// and the break-glass when every admin is locked out. Each change is audited
// in the proxy's audit store by the host's operating-system user.

// localDataDir is --data-dir, required with --local.
func localDataDir(v *viper.Viper) (string, error) {
	dir := v.GetString("data-dir")
	if dir == "" {
		return "", errors.New("data-dir: required with --local; set --data-dir or LIMEN_DATA_DIR to the proxy's data directory")
	}
	return dir, nil
}

// localBackend opens the proxy's store for a --local command: the shared
// database of --database-url, or the SQLite files in --data-dir. sqlite
// reports which; dir is the data directory ("" with a database).
func localBackend(ctx context.Context, v *viper.Viper) (b store.Backend, dir string, err error) {
	db, err := loadDatabaseConfig(v)
	if err != nil {
		return nil, "", err
	}
	if db.URL == "" {
		if dir, err = localDataDir(v); err != nil {
			return nil, "", err
		}
	}
	b, err = db.backend(ctx, dir)
	return b, dir, err
}

// localActor is who acts with --local: the operating-system user running
// the command, as an audit principal ("local" when the OS name is not one a
// principal may have), and the fields that say so (via=local, os_user,
// host).
func localActor() (identity.Principal, map[string]string) {
	p := identity.Principal{Kind: identity.KindUser, Name: "local"}
	fields := map[string]string{"via": "local"}
	if u, err := user.Current(); err == nil {
		fields["os_user"] = u.Username
		if identity.ValidName(u.Username) == nil {
			p.Name = u.Username
		}
	} else {
		fields["os_uid"] = fmt.Sprint(os.Getuid())
	}
	if h, err := os.Hostname(); err == nil {
		fields["host"] = h
	}
	return p, fields
}

// openLocalAudit opens the proxy's audit store in b for writing.
func openLocalAudit(ctx context.Context, b store.Backend) (*audit.Store, error) {
	db, err := b.Audit(ctx, false)
	if err == nil {
		var s *audit.Store
		if s, err = audit.New(ctx, db, audit.Options{}); err == nil {
			return s, nil
		}
		db.Close()
	}
	return nil, fmt.Errorf("open the proxy's audit store: %w (with --local, changes are audited)", err)
}

// localLocks is the break-glass on the proxy's lock store.
type localLocks struct {
	adminapi.Local
	store   *locks.Store
	audit   *audit.Store
	backend store.Backend
}

// openLocalLocks opens the lock and audit stores of the proxy, in its
// database or its data directory. The SQLite lock store must exist: a
// mistyped --data-dir must not create a lock store no proxy reads.
func openLocalLocks(ctx context.Context, v *viper.Viper) (*localLocks, error) {
	b, dir, err := localBackend(ctx, v)
	if err != nil {
		return nil, err
	}
	l, err := openLocalLocksIn(ctx, b, dir)
	if err != nil {
		b.Close()
	}
	return l, err
}

func openLocalLocksIn(ctx context.Context, b store.Backend, dir string) (*localLocks, error) {
	if dir != "" {
		if _, err := os.Stat(locks.Path(dir)); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no lock store at %s: is --data-dir the proxy's data directory, and has the proxy run?", locks.Path(dir))
		}
	}
	ldb, err := b.Locks(ctx)
	if err != nil {
		return nil, err
	}
	ls := locks.New(ldb)
	as, err := openLocalAudit(ctx, b)
	if err != nil {
		return nil, err
	}
	by, fields := localActor()
	return &localLocks{Local: adminapi.Local{Store: ls, Audit: as, By: by, Fields: fields}, store: ls, audit: as, backend: b}, nil
}

func (l *localLocks) close() {
	l.store.Close()
	l.audit.Close()
	l.backend.Close()
}
