package audit

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRequestAudit compares, one request at a time, how long the
// audit holds a response back after the request's round trip to the API
// server, which takes rt (a sleep stands in for it):
//   - serial, the proxy before issue 13: after the round trip, one event
//     (kube.request) is committed before the response is relayed;
//   - overlapped, the proxy now: the record (kube.sent) is submitted before
//     the round trip and waited for after it; the outcome (kube.request) is
//     appended (Append: committed with the next record, or after
//     Options.Linger).
//
// wait-µs is the time a response waited for the audit after its round
// trip (p50 and p99 over the run), the figure the overlap exists to cut; it
// does not depend on how late a loaded machine wakes the sleep. ns/op is
// the whole request, sleep included; cpu-µs/op the process's CPU per
// request (user and system, the batcher and SQLite included).
func BenchmarkRequestAudit(b *testing.B) {
	ctx := context.Background()
	for _, rt := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond} {
		b.Run(fmt.Sprintf("serial/rt=%s", rt), func(b *testing.B) {
			s, _ := openTemp(b, Options{})
			cpu := cpuTime()
			var waits []time.Duration
			i := 0
			for b.Loop() {
				sent := sentEvent(sessionID(i), "GET", "get", "", t0)
				i++
				roundTrip(rt)
				start := time.Now()
				if err := s.Emit(ctx, outcomeOf(sent)); err != nil {
					b.Fatal(err)
				}
				waits = append(waits, time.Since(start))
			}
			report(b, s, waits, cpuTime()-cpu)
		})
		b.Run(fmt.Sprintf("overlapped/rt=%s", rt), func(b *testing.B) {
			s, _ := openTemp(b, Options{})
			cpu := cpuTime()
			var waits []time.Duration
			i := 0
			for b.Loop() {
				sent := sentEvent(sessionID(i), "GET", "get", "", t0)
				i++
				record := s.Submit(sent)
				roundTrip(rt)
				start := time.Now()
				if err := record.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				waits = append(waits, time.Since(start))
				s.Append(outcomeOf(sent))
			}
			b.StopTimer()
			if err := s.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			report(b, s, waits, cpuTime()-cpu)
		})
	}
}

func roundTrip(rt time.Duration) {
	if rt > 0 {
		time.Sleep(rt)
	}
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, s *Store, waits []time.Duration, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(1, b.N)), "cpu-µs/op")
	slices.Sort(waits)
	if len(waits) > 0 {
		b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "p50-wait-µs")
		b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-wait-µs")
	}
	b.ReportMetric(float64(s.events.Load())/float64(max(1, s.commits.Load())), "events/commit")
}
