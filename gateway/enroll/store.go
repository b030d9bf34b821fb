package enroll

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/store/sqlite"
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
const TokenFileName = sqlite.TokensFile

// TokenInfo describes a stored token; it never carries the secret.
type TokenInfo struct {
	ID      string     `json:"id"`
	Cluster string     `json:"cluster"`
	Creator string     `json:"creator"`
	Created time.Time  `json:"created"`
	Expires time.Time  `json:"expires"`
	Used    *time.Time `json:"used,omitempty"`
}

// TokenStore keeps join tokens through a store.Tokens driver (SQLite or
// PostgreSQL). Creation and every redemption
// attempt are audited; if the audit trail fails, the action fails.
type TokenStore struct {
	db    store.Tokens
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

// OpenTokenStore opens (creating if needed) the SQLite token store at path.
func OpenTokenStore(path string, opts TokenStoreOptions) (*TokenStore, error) {
	if opts.Audit == nil {
		return nil, errors.New("open token store: an audit sink is required: token use is audited")
	}
	db, err := sqlite.OpenTokens(context.Background(), path)
	if err != nil {
		return nil, err
	}
	s, err := NewTokenStore(db, opts)
	if err != nil {
		db.Close()
	}
	return s, err
}

// NewTokenStore builds the token store over db; Close closes db.
func NewTokenStore(db store.Tokens, opts TokenStoreOptions) (*TokenStore, error) {
	if opts.Audit == nil {
		return nil, errors.New("open token store: an audit sink is required: token use is audited")
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
	var auditErr error
	err = s.db.Insert(ctx, store.TokenRecord{Hash: h[:], ID: info.ID, Cluster: cluster, Creator: info.Creator,
		Created: now.Unix(), Expires: info.Expires.Unix()}, func() error {
		auditErr = s.audit.Emit(ctx, audit.Event{Type: audit.TypeTokenCreate, Time: now, Principal: creator, Cluster: cluster,
			Fields: map[string]string{"token_id": info.ID, "expires": info.Expires.Format(time.RFC3339)}})
		return auditErr
	})
	if auditErr != nil {
		return Token{}, TokenInfo{}, fmt.Errorf("create token: %w: %v", ErrAuditUnavailable, auditErr)
	}
	if err != nil {
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
	var auditErr error
	err := s.db.Update(ctx, h[:], func(t *store.TokenRecord) error {
		switch {
		case t.Used != 0:
			return ErrTokenUsed
		case !s.now().Before(time.Unix(t.Expires, 0)):
			return ErrTokenExpired
		case t.Cluster != cluster:
			return fmt.Errorf("%w (%s), not %s: start the worker with --cluster %s or create a token for %s", ErrTokenCluster, t.Cluster, cluster, t.Cluster, cluster)
		}
		t.Used, t.UsedBy = s.now().Unix(), addr
		// The event is durable before the token counts as used: if the
		// audit trail refuses it, the transaction is rolled back.
		auditErr = s.audit.Emit(ctx, audit.Event{Type: audit.TypeTokenUse, Time: s.now(), Cluster: cluster, ClientAddr: addr,
			Fields: map[string]string{"token_id": tok.ID()}})
		return auditErr
	})
	switch {
	case auditErr != nil:
		return fmt.Errorf("redeem token: %w: %v", ErrAuditUnavailable, auditErr)
	case errors.Is(err, store.ErrNotFound):
		return ErrTokenUnknown
	case IsRefusal(err):
		return err
	case err != nil:
		return fmt.Errorf("redeem token: %w", err)
	}
	return nil
}

// List returns every stored token, newest first.
func (s *TokenStore) List(ctx context.Context) ([]TokenInfo, error) {
	recs, err := s.db.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	var out []TokenInfo
	for _, r := range recs {
		ti := TokenInfo{ID: r.ID, Cluster: r.Cluster, Creator: r.Creator,
			Created: time.Unix(r.Created, 0).UTC(), Expires: time.Unix(r.Expires, 0).UTC()}
		if r.Used != 0 {
			u := time.Unix(r.Used, 0).UTC()
			ti.Used = &u
		}
		out = append(out, ti)
	}
	return out, nil
}
