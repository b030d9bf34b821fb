package relay

import "io"

// Bulk copies the body of a response that is not a stream (a GET, a LIST)
// from src to dst through buf. A read that fills buf is written without a
// flush, since more is on its way: a LIST leaves in full buffers (full
// tunnel frames, HTTP/2 frames and TLS records) instead of one small write,
// record and system call per read. After a read that does not fill buf
// flush, if not nil, is called, so that a body the API server holds open
// still reaches the user as it comes. With a nil flush nothing is flushed:
// the caller flushes at the end (a body of known length).
func Bulk(dst io.Writer, src io.Reader, buf []byte, flush func() error) error {
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			if flush != nil && n < len(buf) && rerr == nil {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
