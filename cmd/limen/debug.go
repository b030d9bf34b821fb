package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

func addDebugFlags(f *pflag.FlagSet) {
	f.String("debug-listen", "", "serve Go's pprof profiles on this loopback HOST:PORT (off by default)")
}

// serveDebug serves /debug/pprof/ on a loopback address until ctx ends. The
// profiles show the process's internals, so other addresses are refused.
func serveDebug(ctx context.Context, v *viper.Viper, log *slog.Logger) error {
	addr := v.GetString("debug-listen")
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		return fmt.Errorf("debug-listen %q: want a loopback HOST:PORT such as 127.0.0.1:6060", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server", "err", err)
		}
	}()
	log.Info("pprof profiles served", "addr", ln.Addr().String())
	return nil
}
