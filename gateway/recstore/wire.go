package recstore

// Control-stream messages of the recording upload. The worker sends a
// recording as a sequence of Chunk messages, each answered by an Ack; the
// last Chunk is Final and its Ack carries the SHA-256 the store verified and
// kept, after which the worker may drop its copy.
const (
	MsgChunk = "recording.chunk"
	MsgAck   = "recording.ack"
)

// MaxChunk bounds the data carried by one Chunk, well below the tunnel's
// frame limit once base64-encoded in JSON.
const MaxChunk = 64 << 10

// Chunk is one piece of a recording upload.
type Chunk struct {
	// ID names the recording (the session id).
	ID string `json:"id"`
	// Offset is where Data goes; 0 starts the upload over.
	Offset int64  `json:"offset"`
	Data   []byte `json:"data,omitempty"`
	// Size is the whole recording's size. A worker sends it on every chunk,
	// so that a store without room refuses the upload at its first chunk.
	Size int64 `json:"size,omitempty"`
	// Final marks the last chunk; Size and SHA256 then describe the whole
	// recording, and the store verifies both before keeping it.
	Final  bool   `json:"final,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// Ack answers a Chunk.
type Ack struct {
	ID string `json:"id"`
	// Next is the offset the store expects next.
	Next int64 `json:"next"`
	// SHA256 is set once the recording is stored, to the verified checksum.
	// It is set on the Ack of a first (Offset 0) chunk too when the
	// recording is already stored: the worker compares it with its own and
	// drops its copy if they match, without sending the rest again.
	SHA256 string `json:"sha256,omitempty"`
	// Error, if set, means the chunk was not accepted; the worker starts the
	// upload over after a backoff.
	Error string `json:"error,omitempty"`
}
