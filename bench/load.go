package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Cell is the outcome of one latency run: n requests of one URL at one
// concurrency.
type Cell struct {
	Hist     Histogram
	Elapsed  time.Duration
	Errors   int   // requests that failed or did not answer 200
	Bytes    int64 // response bytes read
	FirstErr error
}

// Throughput is the completed requests per second over the run.
func (c *Cell) Throughput() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Hist.Len()) / c.Elapsed.Seconds()
}

// Load sends n GET requests of url with concurrency workers, each timing its
// requests from send to the last body byte. Failed requests are counted, not
// timed.
func Load(ctx context.Context, hc *http.Client, url string, concurrency, n int) (*Cell, error) {
	if concurrency < 1 || n < 1 {
		return nil, fmt.Errorf("load: concurrency %d, n %d: both must be positive", concurrency, n)
	}
	var next atomic.Int64
	parts := make([]Cell, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			c := &parts[w]
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				read, err := get(ctx, hc, url)
				if err != nil {
					c.Errors++
					if c.FirstErr == nil {
						c.FirstErr = err
					}
					continue
				}
				c.Hist.Record(time.Since(t0))
				c.Bytes += read
			}
		})
	}
	wg.Wait()
	out := &Cell{Elapsed: time.Since(start)}
	for i := range parts {
		out.Hist.Merge(&parts[i].Hist)
		out.Errors += parts[i].Errors
		out.Bytes += parts[i].Bytes
		if out.FirstErr == nil {
			out.FirstErr = parts[i].FirstErr
		}
	}
	return out, ctx.Err()
}

func get(ctx context.Context, hc *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, err
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return n, nil
}

// Watches holds open idle watch requests until Close.
type Watches struct {
	cancel context.CancelFunc
	bodies []io.Closer
}

// OpenWatches starts n watch requests of url (which must ask for a watch of
// something that does not change) and returns once every one has its
// response headers. At most 32 are being opened at a time.
func OpenWatches(ctx context.Context, hc *http.Client, url string, n int) (*Watches, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watches{cancel: cancel}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body, err := openWatch(ctx, hc, url)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				return
			}
			w.bodies = append(w.bodies, body)
		})
	}
	wg.Wait()
	if firstErr != nil {
		w.Close()
		return nil, fmt.Errorf("open %d watches: %d opened, first error: %w", n, len(w.bodies), firstErr)
	}
	return w, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func openWatch(ctx context.Context, hc *http.Client, url string) (io.Closer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("watch: %s", resp.Status)
	}
	return resp.Body, nil
}

// Len is the number of open watches.
func (w *Watches) Len() int { return len(w.bodies) }

// Close ends every watch.
func (w *Watches) Close() {
	w.cancel()
	for _, b := range w.bodies {
		b.Close()
	}
}
