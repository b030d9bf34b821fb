// Package store is the one interface through which Limen keeps what its
// proxies must agree on: users, bots and their join secrets, workers' join
// tokens, locks and the audit trail. It has two engines: SQLite files in
// the proxy's data directory (gateway/store/sqlite, the embedded default)
// and one PostgreSQL database shared by several proxies
// (gateway/store/postgres).
//
// The shape is Go CDK's: the domain packages (users, bots, enroll, locks,
// audit) are the portable API and keep every rule (validation, hashing,
// expiry, single use, fail-closed audit); each engine implements the
// narrow driver interfaces below with its own SQL, kept in one place per
// engine; and gateway/store/storetest is the conformance suite both must
// pass, run through the domain packages.
//
// Records are storage rows: times are Unix seconds or nanoseconds as the
// field says, so that both engines store exactly the same values.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors a driver returns; the domain packages turn them into their own.
var (
	// ErrNotFound means no row has that key.
	ErrNotFound = errors.New("store: not found")
	// ErrExists means a row with that key exists already.
	ErrExists = errors.New("store: exists already")
)

// Backend opens the drivers of one engine. Each method migrates what it
// opens first (see Migrate rules in the engines). Close releases
// everything the Backend opened.
type Backend interface {
	Users(ctx context.Context) (Users, error)
	Bots(ctx context.Context) (Bots, error)
	Tokens(ctx context.Context) (Tokens, error)
	Locks(ctx context.Context) (Locks, error)
	// Audit opens the audit trail; readOnly opens it for searching only
	// (limen audit search), and fails when there is none.
	Audit(ctx context.Context, readOnly bool) (Audit, error)
	// Sessions opens the directory of every proxy's sessions.
	Sessions(ctx context.Context) (Sessions, error)
	// Policy opens the policy revision floor and its refusals.
	Policy(ctx context.Context) (Policy, error)
	// SignIns opens the console's sign-ins.
	SignIns(ctx context.Context) (SignIns, error)
	// Requests opens the access requests (requests.go).
	Requests(ctx context.Context) (Requests, error)
	// Engine names the engine ("sqlite", "postgres") for logs and doctor.
	Engine() string
	Close() error
}

// UserRecord is a local user. Traits is its JSON.
type UserRecord struct {
	Name             string
	Hash             []byte
	Traits           string
	Created, Updated int64 // Unix seconds
}

// Users stores local users.
type Users interface {
	// Insert adds u; ErrExists when the name is taken.
	Insert(ctx context.Context, u UserRecord) error
	// Delete removes a user; ErrNotFound when there is none.
	Delete(ctx context.Context, name string) error
	// SetHash replaces a user's hash; ErrNotFound when there is none.
	SetHash(ctx context.Context, name string, hash []byte, updated int64) error
	// Get returns a user with its hash; ErrNotFound when there is none.
	Get(ctx context.Context, name string) (UserRecord, error)
	// List returns every user by name, without hashes.
	List(ctx context.Context) ([]UserRecord, error)
	Close() error
}

// BotRecord is a bot. Traits is its JSON.
type BotRecord struct {
	Name    string
	Traits  string
	Created int64 // Unix seconds
}

// SecretRecord is a bot's join secret, by its SHA-256.
type SecretRecord struct {
	ID, Bot  string
	Hash     []byte
	Expires  int64 // Unix seconds
	UsesLeft int   // -1: unlimited
	By       string
}

// Bots stores bots and their join secrets.
type Bots interface {
	// Insert adds b; ErrExists when the name is taken.
	Insert(ctx context.Context, b BotRecord) error
	// Delete removes a bot and its secrets; ErrNotFound when there is none.
	Delete(ctx context.Context, name string) error
	Get(ctx context.Context, name string) (BotRecord, error)
	List(ctx context.Context) ([]BotRecord, error)
	// InsertSecret adds s; ErrNotFound when its bot does not exist.
	InsertSecret(ctx context.Context, s SecretRecord) error
	// UpdateSecret reads the secret id, lets fn change it and writes the
	// change back, in one transaction that keeps any other UpdateSecret of
	// id out until it ends; an error from fn aborts it and is returned.
	// ErrNotFound when there is no such secret.
	UpdateSecret(ctx context.Context, id string, fn func(*SecretRecord) error) error
	Close() error
}

// TokenRecord is a worker's join token, by the SHA-256 of its secret.
type TokenRecord struct {
	Hash             []byte
	ID, Cluster      string
	Creator          string
	Created, Expires int64 // Unix seconds
	Used             int64 // Unix seconds; 0 while unused
	UsedBy           string
}

// Tokens stores join tokens.
type Tokens interface {
	// Insert adds t and calls beforeCommit inside the transaction: an
	// error from it (the audit trail refused the event) leaves nothing
	// stored.
	Insert(ctx context.Context, t TokenRecord, beforeCommit func() error) error
	// Update reads the token with hash, lets fn change it and writes the
	// change back, in one transaction that keeps any other Update of the
	// token out until it ends; an error from fn aborts it and is returned.
	// ErrNotFound when there is no such token.
	Update(ctx context.Context, hash []byte, fn func(*TokenRecord) error) error
	// List returns every token, newest first.
	List(ctx context.Context) ([]TokenRecord, error)
	Close() error
}

// Feed is the change feed an engine may offer beside its Backend (the
// PostgreSQL one does: LISTEN/NOTIFY). Watch calls onConnect whenever it
// (re)connects, so that the caller re-reads what it may have missed, and
// onNotify with each announcement's payload (an id: the caller re-reads
// the row), until ctx ends. Channels: LocksChannel.
type Feed interface {
	Watch(ctx context.Context, channel string, onConnect func(), onNotify func(payload string)) error
}

// LocksChannel is the Feed channel of the locks: every change of a lock,
// by any writer, is announced with its target (KIND:NAME).
const LocksChannel = "limen_locks"

// LockRecord is a lock on one target.
type LockRecord struct {
	Kind, Name, Reason string
	Expires            int64 // Unix nanoseconds; 0: until removed
	CreatedBy          string
	Created            int64 // Unix nanoseconds
}

// Locks stores locks, at most one per target (kind, name).
//
// The table is the truth. A change is announced on the engine's Feed when
// it has one (PostgreSQL LISTEN/NOTIFY carrying the target, so that every
// proxy re-reads); List is what a proxy re-reads after it reconnects.
type Locks interface {
	// Put stores l, replacing any lock on its target.
	Put(ctx context.Context, l LockRecord) error
	// Delete removes the lock on (kind, name) and returns it; ErrNotFound
	// when there is none.
	Delete(ctx context.Context, kind, name string) (LockRecord, error)
	// List deletes the locks expired at nowNS and returns the others,
	// ordered by kind and name.
	List(ctx context.Context, nowNS int64) ([]LockRecord, error)
	Close() error
}

// SessionRecord is one session (exec, attach, port-forward, watch, logs
// -f) as the proxy that relays it last wrote it.
type SessionRecord struct {
	ID, Proxy string
	// Info is the session's JSON (gateway/sessions.Info).
	Info           string
	StartNS, EndNS int64 // Unix nanoseconds; EndNS 0 while live
	// KillBy names who asked, through any proxy, that the session be
	// killed (RequestKill); "" when nobody did. A later Put keeps it.
	KillBy string
}

// Sessions is the directory of sessions: what the console of any proxy
// lists, and what a kill names. Each proxy's registry stays the truth of
// its own live streams; the directory is what the others know of them.
type Sessions interface {
	// Put stores s, replacing what was stored of it.
	Put(ctx context.Context, s SessionRecord) error
	// List returns up to limit sessions, the newest start first.
	List(ctx context.Context, limit int) ([]SessionRecord, error)
	// Get returns session id; ErrNotFound when there is none.
	Get(ctx context.Context, id string) (SessionRecord, error)
	// RequestKill marks live session id as to be killed by by, and
	// announces it on the engine's Feed (KillsChannel, payload: the id) so
	// that the proxy relaying it ends it; it returns the record as marked.
	// ErrNotFound when no live session has that id.
	RequestKill(ctx context.Context, id, by string) (SessionRecord, error)
	Close() error
}

// KillsChannel is the Feed channel of kill requests: a session marked with
// RequestKill is announced with its id; the proxy that relays it re-reads
// the row and ends it.
const KillsChannel = "limen_kills"

// FloorRecord is the newest policy bundle revision any proxy verified.
type FloorRecord struct {
	// Revision is the bundle revision, an unsigned decimal integer;
	// Key is it zero-padded to 20 digits, so that keys order as numbers.
	Revision, Key string
	// Digest is the SHA-256 of what the bundle activates.
	Digest []byte
}

// RefusalRecord is one refused bundle.
type RefusalRecord struct {
	TimeNS                 int64
	Reason, Revision       string
	Unverified             bool
	Active, Error, ProxyID string
}

// Policy stores the policy revision floor every proxy honours (a bundle
// service may never take the deployment back behind it) and the bundles
// refused.
type Policy interface {
	// Floor returns the stored floor; false when there is none yet.
	Floor(ctx context.Context) (FloorRecord, bool, error)
	// RaiseFloor stores f unless the stored floor's Key is at least f's,
	// and returns the floor stored afterwards.
	RaiseFloor(ctx context.Context, f FloorRecord) (FloorRecord, error)
	AddRefusal(ctx context.Context, r RefusalRecord) error
	// Refusals returns the newest limit refusals, newest first.
	Refusals(ctx context.Context, limit int) ([]RefusalRecord, error)
	Close() error
}

// SignInRecord is one signed-in browser of the console, by the SHA-256 of
// its cookie (hex), so that the store holds no usable credential.
type SignInRecord struct {
	Digest string
	// Principal is the signed-in principal's JSON.
	Principal string
	CSRF      string
	Expires   int64 // Unix nanoseconds
	// Local marks a local user's sign-in (by password).
	Local bool
}

// SignIns stores the console's sign-ins: shared, so that a browser signed
// in through one proxy is signed in at every proxy behind the balancer.
type SignIns interface {
	// Put stores s and deletes the sign-ins expired at nowNS.
	Put(ctx context.Context, s SignInRecord, nowNS int64) error
	// Get returns the sign-in of digest unless it expired at nowNS (and
	// deletes the expired ones); ErrNotFound otherwise.
	Get(ctx context.Context, digest string, nowNS int64) (SignInRecord, error)
	Delete(ctx context.Context, digest string) error
	Close() error
}

// Audit event types the audit engine must know by name: Search leaves out
// a kube.sent whose outcome (its session's kube.request or auth.denied) is
// stored. They equal gateway/audit's Type constants (tested there).
const (
	AuditKubeSent    = "kube.sent"
	AuditKubeRequest = "kube.request"
	AuditAuthDenied  = "auth.denied"
)

// AuditRecord is one stored audit event: the columns searched and the
// event's JSON.
type AuditRecord struct {
	// Seq is assigned by the engine, growing in commit order.
	Seq       int64
	TimeNS    int64
	Type      string
	Who       string // "kind:name", or "" with no principal
	Name      string // the principal's name
	Cluster   string
	Verb      string
	SessionID string
	// Action is an auth.denied event's refused action, "" otherwise.
	Action string
	Data   []byte
	// OutcomeUnknown is set by Search on a kube.sent row whose session
	// has no outcome stored.
	OutcomeUnknown bool
}

// AuditQuery selects events; empty fields match everything.
type AuditQuery struct {
	// User matches Name or Who.
	User, Cluster, Verb, Type string
	// Action keeps the auth.denied events that refused it.
	Action string
	// OutcomeUnknown keeps only the kube.sent events without an outcome.
	OutcomeUnknown bool
	// SinceNS keeps events at or after it; 0 keeps all.
	SinceNS int64
	// Limit keeps the newest Limit events; it is at least 1.
	Limit int
}

// Audit stores the audit trail. The group commit, the size limit and the
// fail-closed rules live in gateway/audit; the engine writes and reads.
type Audit interface {
	// Append stores rows in one transaction, in order, and returns once it
	// is durable (fsynced); on error none is stored.
	Append(ctx context.Context, rows []AuditRecord) error
	// Search returns the newest matching events, newest first. Unless
	// q.Type is kube.sent or q.OutcomeUnknown is set, a kube.sent whose
	// outcome is stored is left out.
	Search(ctx context.Context, q AuditQuery) ([]AuditRecord, error)
	// SessionEvent returns the first event of type typ of a session.
	SessionEvent(ctx context.Context, sessionID, typ string) (AuditRecord, bool, error)
	// After returns up to limit events with Seq > afterSeq, by Seq (audit
	// export's durable cursor).
	After(ctx context.Context, afterSeq int64, limit int) ([]AuditRecord, error)
	// DeleteBefore deletes up to limit of the oldest events stored before
	// beforeNS whose Seq is at most throughSeq, and returns how many
	// (retention, which never deletes past an exporter's cursor).
	DeleteBefore(ctx context.Context, beforeNS, throughSeq int64, limit int) (int64, error)
	// Span returns the lowest and highest Seq stored and the oldest
	// TimeNS; all zero when the trail is empty.
	Span(ctx context.Context) (first, last, oldestNS int64, err error)
	// Used is the bytes the trail holds (what the size limit counts); Size
	// the space it takes on disk, free space included; Count the events.
	Used(ctx context.Context) (int64, error)
	Size(ctx context.Context) (int64, error)
	Count(ctx context.Context) (int64, error)
	// Location names where the trail is (a file, or the database) in
	// messages.
	Location() string
	Close() error
}

// Migration is one step of a domain's schema; its Version is its index in
// the domain's list plus one.
type Migration struct {
	Version int
	SQL     string
}

// ErrSchemaNewer means the database was migrated by a newer Limen.
var ErrSchemaNewer = errors.New("database schema is newer than this binary")

// CheckVersion refuses a stored schema version newer than the known
// migrations of domain.
func CheckVersion(where, domain string, have int, known []Migration) error {
	if have > len(known) {
		return fmt.Errorf("%s: the %s schema is at version %d, this limen knows versions up to %d: %w; "+
			"run the limen release that wrote it (or a newer one), never an older one", where, domain, have, len(known), ErrSchemaNewer)
	}
	return nil
}

// PeerRecord is one proxy of a deployment as the others see it: its id and
// the address workers dial to reach it directly ("" for none).
type PeerRecord struct {
	ID, Addr string
}

// PeerDirectory is where the proxies sharing one database find each other
// (issue #28: every worker keeps a tunnel to every live proxy). It is
// optional: an engine that one proxy alone uses (SQLite) has none, and the
// proxy then knows only itself.
type PeerDirectory interface {
	// Heartbeat records that p is alive now, by the database's clock.
	Heartbeat(ctx context.Context, p PeerRecord) error
	// Live lists the proxies whose last heartbeat is younger than ttl, by
	// the database's clock, so that proxies whose clocks differ agree.
	Live(ctx context.Context, ttl time.Duration) ([]PeerRecord, error)
}

// ReplayLedger remembers single-use token ids for every proxy sharing the
// store, so that a CI token logs in once in the whole deployment, not once
// at each proxy. Optional, like PeerDirectory: the embedded engine's one
// proxy keeps them in memory (gateway/bots.ReplayCache).
type ReplayLedger interface {
	// UseOnce records key until expiresNS and reports true, unless key is
	// recorded already and not expired at nowNS (false: a replay).
	UseOnce(ctx context.Context, key string, expiresNS, nowNS int64) (bool, error)
}

// Leases let one proxy of many hold a named job, so that the job runs once
// in the deployment and moves to another proxy when its holder dies (the
// audit export to one receiver). Optional: one proxy alone needs none.
type Leases interface {
	// Hold waits until this process holds lease name, or ctx ends (its
	// error), then runs fn with a context that ends when the lease is lost
	// (the holder's connection to the store broke) or ctx ends, and
	// releases the lease when fn returns.
	Hold(ctx context.Context, name string, fn func(ctx context.Context)) error
}

// ExportCursors keeps the audit export's cursors (the sequence number of
// the last event each receiver accepted) in the store, so that whichever
// proxy holds the export's lease resumes where the last holder stopped.
// Optional, with Leases.
type ExportCursors interface {
	// ExportCursor returns sink's cursor; 0 when none is stored.
	ExportCursor(ctx context.Context, sink string) (int64, error)
	// SetExportCursor stores sink's cursor; it never moves back.
	SetExportCursor(ctx context.Context, sink string, seq int64) error
}
