// Package otlpsink is an OTLP/gRPC trace receiver for tests: it keeps every
// span exported to it, from Limen's processes and from the real
// kube-apiserver alike, so a test can check that they form one trace.
package otlpsink

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Span is what a test needs of one received span.
type Span struct {
	Service      string // the resource's service.name
	Name         string
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex; empty for a root span
	Attributes   map[string]string
	Start, End   time.Time
}

// Sink receives spans until Stop.
type Sink struct {
	coltrace.UnimplementedTraceServiceServer
	Addr string // host:port

	srv *grpc.Server
	mu  sync.Mutex
	got []Span
	new chan struct{}
}

// Start listens on a free loopback port.
func Start() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{Addr: ln.Addr().String(), srv: grpc.NewServer(), new: make(chan struct{})}
	coltrace.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Stop ends the server.
func (s *Sink) Stop() { s.srv.Stop() }

// Export keeps the spans of one export request.
func (s *Sink) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range sp.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					default:
						attrs[kv.GetKey()] = v.String()
					}
				}
				spans = append(spans, Span{
					Service: service, Name: sp.GetName(),
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()), Attributes: attrs,
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
				})
			}
		}
	}
	s.mu.Lock()
	s.got = append(s.got, spans...)
	close(s.new)
	s.new = make(chan struct{})
	s.mu.Unlock()
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received so far.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.got...)
}

// Wait returns the spans once ok accepts them, or the last ones seen when
// ctx ends first.
func (s *Sink) Wait(ctx context.Context, ok func([]Span) bool) ([]Span, bool) {
	for {
		s.mu.Lock()
		spans, next := append([]Span(nil), s.got...), s.new
		s.mu.Unlock()
		if ok(spans) {
			return spans, true
		}
		select {
		case <-next:
		case <-ctx.Done():
			return spans, false
		}
	}
}
