package decode_test

import (
	"fmt"
	"net/http"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// printer reports the events it cares about; NopHandler ignores the rest.
type printer struct{ stream.NopHandler }

func (printer) Stdout(p []byte) error {
	fmt.Printf("stdout %q\n", p)
	return nil
}

func (printer) Exit(s stream.ExitStatus) error {
	fmt.Printf("exit %d\n", s.Code)
	return nil
}

// The worker tees each direction of an upgraded connection into its
// decoder before relaying the bytes (worker/relay.go), so output is
// recorded before the user sees it. Here the API server's side of a kubectl
// exec over WebSocket (v5.channel.k8s.io) arrives in pieces that split a
// frame header, as TCP may deliver it.
func Example() {
	hdr := http.Header{}
	hdr.Set("Upgrade", "websocket")
	hdr.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
	pair, err := decode.ForResponse(hdr, printer{})
	if err != nil {
		fmt.Println(err) // a protocol the worker cannot decode: the stream ends
		return
	}
	// Binary frames from the server (unmasked): channel 1 is stdout, channel 3
	// the status.
	frame := func(channel byte, payload string) []byte {
		return append([]byte{0x82, byte(1 + len(payload)), channel}, payload...)
	}
	out := frame(1, "hello\n")
	status := frame(3, `{"metadata":{},"status":"Failure","reason":"NonZeroExitCode",`+
		`"details":{"causes":[{"reason":"ExitCode","message":"7"}]}}`)
	wire := append(out, status...)
	for _, piece := range [][]byte{wire[:1], wire[1 : len(out)+1], wire[len(out)+1:]} {
		if _, err := pair.Server.Write(piece); err != nil {
			fmt.Println(err) // undecodable: the stream ends
			return
		}
	}
	fmt.Println("pending", pair.Server.Pending())
	// Output:
	// stdout "hello\n"
	// exit 7
	// pending 0
}
