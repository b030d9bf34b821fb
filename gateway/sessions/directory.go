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
}

// NewDirectory starts writing to db as proxy; Close stops it.
func NewDirectory(db store.Sessions, proxy string, log *slog.Logger) *Directory {
	if log == nil {
		log = slog.Default()
	}
	d := &Directory{db: db, proxy: proxy, log: log, q: make(chan store.SessionRecord, DirectoryQueue), done: make(chan struct{})}
	go d.run()
	return d
}

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
	var out []Info
	for _, r := range recs {
		if r.Proxy == d.proxy {
			continue
		}
		i, err := decodeRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
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
	i, err := decodeRecord(r)
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
