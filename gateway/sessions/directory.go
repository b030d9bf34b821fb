package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

// DirectoryQueue bounds the session records waiting to be written; past it
// a record is dropped and logged (the registry, not the directory, ends
// streams).
const DirectoryQueue = 1024

// Directory mirrors one proxy's registered sessions into the store's
// directory (store.Sessions), so that every proxy on one database lists
// every proxy's sessions. Records are written behind, in order, by one
// goroutine the Directory owns: a session never waits for the database.
// The registry stays the truth of its own streams.
type Directory struct {
	db    store.Sessions
	proxy string
	log   *slog.Logger
	q     chan store.SessionRecord
	done  chan struct{}
	once  sync.Once
	// live, when set, names the proxies alive now (their heartbeats); a
	// live record of any other proxy is shown ended, ReasonProxyLost.
	live func(context.Context) (map[string]bool, error)
	now  func() time.Time
}

// ErrNoLiveSession means no proxy relays a live session of that id.
var ErrNoLiveSession = errors.New("no live session")

// NewDirectory starts writing to db as proxy; Close stops it.
func NewDirectory(db store.Sessions, proxy string, log *slog.Logger) *Directory {
	if log == nil {
		log = slog.Default()
	}
	d := &Directory{db: db, proxy: proxy, log: log, q: make(chan store.SessionRecord, DirectoryQueue), done: make(chan struct{}),
		now: time.Now}
	go d.run()
	return d
}

// SetLive makes the directory judge other proxies' live sessions by live,
// which names the proxies beating now: the sessions of a proxy that died
// died with it, and must not be listed live forever. Call it before use.
func (d *Directory) SetLive(live func(context.Context) (map[string]bool, error)) { d.live = live }

// Proxy is the name this proxy's sessions carry in the directory.
func (d *Directory) Proxy() string { return d.proxy }

// Record queues i (a start, or an end) for the directory.
func (d *Directory) Record(i Info) {
	i.Proxy = ""
	b, err := json.Marshal(i)
	if err != nil {
		d.log.Error("session not recorded in the directory", "session", i.ID, "err", err)
		return
	}
	r := store.SessionRecord{ID: i.ID, Proxy: d.proxy, Info: string(b), StartNS: i.Start.UnixNano()}
	if !i.End.IsZero() {
		r.EndNS = i.End.UnixNano()
	}
	select {
	case d.q <- r:
	default:
		d.log.Error("session directory queue full; record dropped", "session", i.ID)
	}
}

func (d *Directory) run() {
	defer close(d.done)
	for r := range d.q {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := d.db.Put(ctx, r); err != nil {
			d.log.Error("session not recorded in the directory", "session", r.ID, "err", err)
		}
		cancel()
	}
}

// Close writes what is queued and stops.
func (d *Directory) Close() {
	d.once.Do(func() { close(d.q) })
	<-d.done
}

// Others returns up to limit sessions of the other proxies, newest first,
// with Proxy set.
func (d *Directory) Others(ctx context.Context, limit int) ([]Info, error) {
	recs, err := d.db.List(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("session directory: %w", err)
	}
	alive, err := d.alive(ctx)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, r := range recs {
		if r.Proxy == d.proxy {
			continue
		}
		i, err := d.decode(r, alive)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

// alive reads the live proxies; nil (no judgment) when SetLive was not
// called.
func (d *Directory) alive(ctx context.Context) (map[string]bool, error) {
	if d.live == nil {
		return nil, nil
	}
	m, err := d.live(ctx)
	if err != nil {
		return nil, fmt.Errorf("session directory: live proxies: %w", err)
	}
	return m, nil
}

// decode is decodeRecord, with a live session of a proxy missing from alive
// shown ended.
func (d *Directory) decode(r store.SessionRecord, alive map[string]bool) (Info, error) {
	i, err := decodeRecord(r)
	if err != nil || alive == nil || !i.Live() || alive[r.Proxy] {
		return i, err
	}
	i.End, i.Reason = d.now().UTC(), ReasonProxyLost
	i.Detail = "proxy " + r.Proxy + " stopped beating; its streams ended with it"
	return i, nil
}

// RequestKill asks the proxy relaying live session id to kill it, by by:
// the store marks the session and announces it (store.KillsChannel). It
// returns the session as the directory holds it; ErrNoLiveSession when no
// live proxy relays it.
func (d *Directory) RequestKill(ctx context.Context, id, by string) (Info, error) {
	alive, err := d.alive(ctx)
	if err != nil {
		return Info{}, err
	}
	if r, err := d.db.Get(ctx, id); err == nil && alive != nil && !alive[r.Proxy] {
		return Info{}, fmt.Errorf("session %s: its proxy %s stopped beating, so it ended already: %w", id, r.Proxy, ErrNoLiveSession)
	}
	r, err := d.db.RequestKill(ctx, id, by)
	if errors.Is(err, store.ErrNotFound) {
		return Info{}, fmt.Errorf("session %s: %w", id, ErrNoLiveSession)
	}
	if err != nil {
		return Info{}, fmt.Errorf("session directory: %w", err)
	}
	return decodeRecord(r)
}

// KillRequest reads session id back after an announcement: who asked to
// kill it, when this proxy relays it and it is marked; "" otherwise.
func (d *Directory) KillRequest(ctx context.Context, id string) (by string, err error) {
	r, err := d.db.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("session directory: %w", err)
	}
	if r.Proxy != d.proxy || r.EndNS != 0 {
		return "", nil
	}
	return r.KillBy, nil
}

// Other returns session id when another proxy relays it.
func (d *Directory) Other(ctx context.Context, id string) (Info, bool, error) {
	r, err := d.db.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && r.Proxy == d.proxy {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, fmt.Errorf("session directory: %w", err)
	}
	alive, err := d.alive(ctx)
	if err != nil {
		return Info{}, false, err
	}
	i, err := d.decode(r, alive)
	return i, err == nil, err
}

func decodeRecord(r store.SessionRecord) (Info, error) {
	var i Info
	if err := json.Unmarshal([]byte(r.Info), &i); err != nil {
		return Info{}, fmt.Errorf("session directory: session %s is corrupt: %w", r.ID, err)
	}
	i.Proxy = r.Proxy
	return i, nil
}
