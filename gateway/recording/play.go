package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Play writes the output of the recording in r to w with its original timing
// divided by speed; pauses longer than maxIdle (if > 0, or the header's
// idle_time_limit) are shortened to it. It returns at the end of the
// recording, at an exit event, or when ctx is done.
func Play(ctx context.Context, r io.Reader, w io.Writer, speed float64, maxIdle time.Duration) error {
	if speed <= 0 {
		return fmt.Errorf("play: speed %v must be positive", speed)
	}
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	if maxIdle <= 0 && rd.Header.IdleTimeLimit > 0 {
		maxIdle = time.Duration(rd.Header.IdleTimeLimit * float64(time.Second))
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		wait := ev.Interval
		if maxIdle > 0 && wait > maxIdle {
			wait = maxIdle
		}
		if wait = time.Duration(float64(wait) / speed); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		switch ev.Code {
		case "o":
			if _, err := io.WriteString(w, ev.Data); err != nil {
				return fmt.Errorf("play: %w", err)
			}
		case "x":
			return nil
		}
	}
}
