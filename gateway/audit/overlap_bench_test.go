package audit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRequestAudit compares, one request at a time, what the audit
// adds to a request whose round trip to the API server takes rt (a sleep
// stands in for it):
//   - serial, the proxy before issue 13: the round trip, then one event
//     (kube.request) committed before the response is relayed;
//   - overlapped, the proxy now: the record (kube.sent) submitted before
//     the round trip, waited for after it, and the outcome (kube.request)
//     appended (Append: committed with the next record, or after
//     Options.Linger).
//
// ns/op is a request's latency; added-µs/op what the audit adds to rt.
func BenchmarkRequestAudit(b *testing.B) {
	ctx := context.Background()
	for _, rt := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond} {
		b.Run(fmt.Sprintf("serial/rt=%s", rt), func(b *testing.B) {
			s, _ := openTemp(b, Options{})
			i := 0
			for b.Loop() {
				sent := sentEvent(sessionID(i), "GET", "get", "", t0)
				i++
				roundTrip(rt)
				if err := s.Emit(ctx, outcomeOf(sent)); err != nil {
					b.Fatal(err)
				}
			}
			report(b, s, rt)
		})
		b.Run(fmt.Sprintf("overlapped/rt=%s", rt), func(b *testing.B) {
			s, _ := openTemp(b, Options{})
			i := 0
			for b.Loop() {
				sent := sentEvent(sessionID(i), "GET", "get", "", t0)
				i++
				record := s.Submit(sent)
				roundTrip(rt)
				if err := record.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				s.Append(outcomeOf(sent))
			}
			b.StopTimer()
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			report(b, s, rt)
		})
	}
}

func roundTrip(rt time.Duration) {
	if rt > 0 {
		time.Sleep(rt)
	}
}

func report(b *testing.B, s *Store, rt time.Duration) {
	per := b.Elapsed() / time.Duration(max(1, b.N))
	b.ReportMetric(float64((per - rt).Microseconds()), "added-µs/op")
	b.ReportMetric(float64(s.events.Load())/float64(max(1, s.commits.Load())), "events/commit")
}
