package proxy

import (
	"context"
	"net"
)

// receiveRecording serves one recording upload a worker opened on its own
// tunnel stream (recstore.StreamKind) and streams it into the recording
// store. The worker may upload only under its own cluster, and only the
// recording of a session the proxy relayed to that cluster and that Limen
// records (Kube.RecordingOf); the store refuses the rest (names, overwrites,
// room).
func (s *Server) receiveRecording(ctx context.Context, w workerConn, conn net.Conn) {
	cluster := w.Info().Cluster
	res, err := s.recordings.Serve(conn, cluster, func(id string) error {
		return s.Kube.RecordingOf(ctx, cluster, id)
	})
	log := s.log.With("cluster", cluster, "id", res.Header.ID, "resumed_at", res.Offset, "received", res.Received)
	if err != nil {
		log.Warn("recording upload refused", "err", err)
		return
	}
	log.Info("recording stored", "bytes", res.Reply.Offset, "sha256", res.Reply.SHA256)
}
