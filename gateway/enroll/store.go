package enroll

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
)

// Token lifetimes.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 7 * 24 * time.Hour
)

// Refusals of a join token. All mean "this token cannot enroll this worker";
// the distinct messages tell the operator what to do.
var (
	ErrTokenUnknown = errors.New("join token is not known to this proxy: create one with `limen tokens create`")
	ErrTokenUsed    = errors.New("join token was used already: tokens are single-use, create a new one")
	ErrTokenExpired = errors.New("join token has expired: create a new one")
	ErrTokenCluster = errors.New("join token was created for another cluster")
	// ErrAuditUnavailable means the audit trail refused the event, so the
	// action did not happen.
	ErrAuditUnavailable = errors.New("audit unavailable")
)

// IsRefusal reports whether err from Redeem refuses the token (one of the
// ErrToken errors) rather than reporting a store failure.
func IsRefusal(err error) bool {
	for _, e := range []error{ErrTokenUnknown, ErrTokenUsed, ErrTokenExpired, ErrTokenCluster} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TokenFileName is the token store's file inside the data directory.
const TokenFileName = "tokens.db"

// TokenInfo describes a stored token; it never carries the secret.
type TokenInfo struct {
	ID      string     `json:"id"`
	Cluster string     `json:"cluster"`
	Creator string     `json:"creator"`
	Created time.Time  `json:"created"`
	Expires time.Time  `json:"expires"`
	Used    *time.Time `json:"used,omitempty"`
}

// TokenStore keeps join tokens in SQLite. Creation and every redemption
// attempt are audited; if the audit trail fails, the action fails.
type TokenStore struct {
	db    *sql.DB
	audit audit.Sink
	now   func() time.Time
}

// TokenStoreOptions configures OpenTokenStore.
type TokenStoreOptions struct {
	// Audit receives token.create and token.use events, and auth.denied
	// for a refused redemption. Required.
	Audit audit.Sink
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// TokenStorePath is the store's path in dataDir.
func TokenStorePath(dataDir string) string { return filepath.Join(dataDir, TokenFileName) }

// OpenTokenStore opens (creating if needed) the token store at path.
func OpenTokenStore(path string, opts TokenStoreOptions) (*TokenStore, error) {
	if opts.Audit == nil {
		return nil, errors.New("open token store: an audit sink is required: token use is audited")
	}
	if err := prepareDBFile(path); err != nil {
		return nil, fmt.Errorf("open token store %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open token store %s: %w", path, err)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS join_tokens (
		hash BLOB PRIMARY KEY, id TEXT NOT NULL, cluster TEXT NOT NULL, creator TEXT NOT NULL,
		created INTEGER NOT NULL, expires INTEGER NOT NULL, used INTEGER, used_by TEXT)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("open token store %s: %w", path, err)
	}
	s := &TokenStore{db: db, audit: opts.Audit, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Close closes the database.
func (s *TokenStore) Close() error { return s.db.Close() }

// Create makes a token for cluster, valid for ttl (0: DefaultTokenTTL), on
// behalf of creator, carrying the CA fingerprint fp.
func (s *TokenStore) Create(ctx context.Context, cluster string, ttl time.Duration, fp string, creator identity.Principal) (Token, TokenInfo, error) {
	if err := ca.ValidClusterName(cluster); err != nil {
		return Token{}, TokenInfo{}, err
	}
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < time.Minute || ttl > MaxTokenTTL {
		return Token{}, TokenInfo{}, fmt.Errorf("token ttl %s: must be between 1m and %s", ttl, MaxTokenTTL)
	}
	tok, err := NewToken(fp)
	if err != nil {
		return Token{}, TokenInfo{}, err
	}
	now := s.now()
	info := TokenInfo{ID: tok.ID(), Cluster: cluster, Creator: creator.String(), Created: now.UTC(), Expires: now.Add(ttl).UTC()}
	h := tok.hash()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Token{}, TokenInfo{}, fmt.Errorf("create token: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO join_tokens (hash, id, cluster, creator, created, expires) VALUES (?, ?, ?, ?, ?, ?)`,
		h[:], info.ID, cluster, info.Creator, now.Unix(), info.Expires.Unix()); err != nil {
		return Token{}, TokenInfo{}, fmt.Errorf("create token: %w", err)
	}
	if err := s.audit.Emit(ctx, audit.Event{Type: audit.TypeTokenCreate, Time: now, Principal: creator, Cluster: cluster,
		Fields: map[string]string{"token_id": info.ID, "expires": info.Expires.Format(time.RFC3339)}}); err != nil {
		return Token{}, TokenInfo{}, fmt.Errorf("create token: %w: %v", ErrAuditUnavailable, err)
	}
	if err := tx.Commit(); err != nil {
		return Token{}, TokenInfo{}, fmt.Errorf("create token: %w", err)
	}
	return tok, info, nil
}

// Redeem marks tok used by a worker for cluster, connecting from addr. It
// succeeds once per token; a token for another cluster is refused and stays
// unused.
func (s *TokenStore) Redeem(ctx context.Context, tok Token, cluster, addr string) error {
	err := s.redeem(ctx, tok, cluster, addr)
	if err != nil {
		// The refusal is audited best-effort; the refusal stands either way.
		// A store failure is no refusal and is the caller's to report.
		if IsRefusal(err) {
			_ = s.audit.Emit(ctx, audit.Event{Type: audit.TypeAuthDenied, Time: s.now(), Cluster: cluster, ClientAddr: addr,
				Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionEnroll, Reason: "join token: " + err.Error(), Path: Path},
				Fields: map[string]string{"token_id": tok.ID()}})
		}
	}
	return err
}

func (s *TokenStore) redeem(ctx context.Context, tok Token, cluster, addr string) error {
	h := tok.hash()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("redeem token: %w", err)
	}
	defer tx.Rollback()
	var want string
	var expires int64
	var used sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT cluster, expires, used FROM join_tokens WHERE hash = ?`, h[:]).Scan(&want, &expires, &used)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrTokenUnknown
	case err != nil:
		return fmt.Errorf("redeem token: %w", err)
	case used.Valid:
		return ErrTokenUsed
	case !s.now().Before(time.Unix(expires, 0)):
		return ErrTokenExpired
	case want != cluster:
		return fmt.Errorf("%w (%s), not %s: start the worker with --cluster %s or create a token for %s", ErrTokenCluster, want, cluster, want, cluster)
	}
	res, err := tx.ExecContext(ctx, `UPDATE join_tokens SET used = ?, used_by = ? WHERE hash = ? AND used IS NULL`, s.now().Unix(), addr, h[:])
	if err != nil {
		return fmt.Errorf("redeem token: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrTokenUsed
	}
	if err := s.audit.Emit(ctx, audit.Event{Type: audit.TypeTokenUse, Time: s.now(), Cluster: cluster, ClientAddr: addr,
		Fields: map[string]string{"token_id": tok.ID()}}); err != nil {
		return fmt.Errorf("redeem token: %w: %v", ErrAuditUnavailable, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("redeem token: %w", err)
	}
	return nil
}

// List returns every stored token, newest first.
func (s *TokenStore) List(ctx context.Context) ([]TokenInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, cluster, creator, created, expires, used FROM join_tokens ORDER BY created DESC`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []TokenInfo
	for rows.Next() {
		var ti TokenInfo
		var created, expires int64
		var used sql.NullInt64
		if err := rows.Scan(&ti.ID, &ti.Cluster, &ti.Creator, &created, &expires, &used); err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		ti.Created, ti.Expires = time.Unix(created, 0).UTC(), time.Unix(expires, 0).UTC()
		if used.Valid {
			u := time.Unix(used.Int64, 0).UTC()
			ti.Used = &u
		}
		out = append(out, ti)
	}
	return out, rows.Err()
}

// prepareDBFile creates the database's directory (0700) and the file itself
// with mode 0600 before SQLite opens it; SQLite gives its journal files the
// database file's mode, so nothing here is readable by other users.
func prepareDBFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
