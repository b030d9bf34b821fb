package decode_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// relay shows how the worker plugs the decoders and the recording into an
// upgraded connection: every chunk is decoded (and recorded) before it is
// relayed, and a decoding or recording error ends both directions.
func relay(resp *http.Response, client, server io.ReadWriteCloser, spool *recording.Spool, meta recording.Meta) error {
	f, err := spool.Create(meta.Session)
	if err != nil {
		return err
	}
	rec := recording.NewWriter(f, meta) // a stream.Handler; add audit counters by wrapping it
	pair, err := decode.ForResponse(resp.Header, rec)
	if err != nil {
		return err // a protocol we cannot decode: end the stream
	}
	errc := make(chan error, 2)
	pipe := func(dst io.Writer, src io.Reader, dec decode.Decoder) {
		// TeeReader writes to dec before Read returns, so before io.Copy relays.
		_, err := io.Copy(dst, io.TeeReader(src, dec))
		errc <- errors.Join(err, dec.Close())
	}
	go pipe(server, client, pair.Client)
	go pipe(client, server, pair.Server)
	err = <-errc
	client.Close() // ends the other direction too
	server.Close()
	err = errors.Join(err, <-errc)
	if ferr := rec.Finish(); ferr != nil {
		return errors.Join(err, ferr)
	}
	item, cerr := f.Commit()
	slog.Info("session recorded", "session", item.ID, "sha256", item.SHA256, "bytes", item.Size)
	return errors.Join(err, cerr)
}

func Example() {
	_ = relay // see relay above; the upload loop calls spool.Pending, Open and Ack.
}
