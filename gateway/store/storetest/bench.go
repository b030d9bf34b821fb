package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/store"
)

// BenchAuditOverlap measures, one request at a time on the engine b opens,
// what the audit adds to a request whose round trip takes rt (a sleep
// stands in for it), as the proxy does it (#13): the record is submitted
// before the round trip and waited for after it, the outcome appended.
// wait-µs (p50, p99) is how long the response waited for its record after
// the round trip; commit-µs the median commit of the engine alone (an
// Emit with nothing to overlap).
func BenchAuditOverlap(b *testing.B, open func(b *testing.B) store.Backend) {
	for _, rt := range []time.Duration{0, 3 * time.Millisecond} {
		b.Run(fmt.Sprintf("rt=%s", rt), func(b *testing.B) {
			be := open(b)
			defer be.Close()
			db, err := be.Audit(ctx, false)
			if err != nil {
				b.Fatal(err)
			}
			s, err := audit.New(ctx, db, audit.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var commits []time.Duration
			for i := range 20 {
				start := time.Now()
				if err := s.Emit(ctx, kubeEvent("warm", "prod", "get", t0.Add(time.Duration(i)))); err != nil {
					b.Fatal(err)
				}
				commits = append(commits, time.Since(start))
			}
			var waits []time.Duration
			i := 0
			for b.Loop() {
				e := kubeEvent("alice", "prod", "get", t0.Add(time.Duration(i)))
				e.Type, e.SessionID = audit.TypeKubeSent, fmt.Sprintf("%032x", i+1)
				i++
				c := s.Submit(e)
				time.Sleep(rt)
				start := time.Now()
				if err := c.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				waits = append(waits, time.Since(start))
				o := e
				o.Type = audit.TypeKubeRequest
				s.Append(o)
			}
			slices.Sort(waits)
			slices.Sort(commits)
			if len(waits) > 0 {
				b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "wait-p50-µs")
				b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "wait-p99-µs")
			}
			b.ReportMetric(float64(commits[len(commits)/2].Microseconds()), "commit-µs")
		})
	}
}
