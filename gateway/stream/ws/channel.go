package ws

import (
	"fmt"

	"github.com/limenhq/limen/gateway/stream"
)

// openChannel checks that the channel of a new message may be sent in this
// direction under the negotiated protocol.
func (d *Decoder) openChannel() error {
	ok := false
	switch d.channel {
	case ChannelStdin, ChannelResize:
		ok = d.cfg.Direction == stream.ClientToServer
	case ChannelStdout, ChannelStderr, ChannelError:
		ok = d.cfg.Direction == stream.ServerToClient
	case ChannelClose:
		// client-go sends [255, 0] after stdin's EOF even under v4, where the
		// server ignores it as an unknown channel; only v5 gives it meaning.
		ok = true
	}
	if !ok {
		return fmt.Errorf("channel %d is not allowed %s in %s", d.channel, d.cfg.Direction, modeName(d.cfg.Mode))
	}
	return nil
}

// channelData routes message bytes (channel byte removed) to the Handler.
func (d *Decoder) channelData(p []byte) error {
	if len(p) == 0 {
		return nil // empty messages open the channels at start
	}
	h := d.cfg.Handler
	switch d.channel {
	case ChannelStdin:
		return h.Stdin(len(p))
	case ChannelStdout:
		return h.Stdout(p)
	case ChannelStderr:
		return h.Stderr(p)
	case ChannelError:
		return d.status.Feed(p, d.exit)
	case ChannelResize:
		return d.resize.Feed(p, d.resized)
	case ChannelClose:
		if d.cfg.Mode != ModeChannelV5 {
			return nil
		}
		if len(d.closeMsg)+len(p) > 1 {
			return fmt.Errorf("close signal longer than [255, channel]")
		}
		d.closeMsg = append(d.closeMsg, p...)
	}
	return nil
}

// closeSignal reports a complete v5 close signal.
func (d *Decoder) closeSignal() error {
	if d.cfg.Mode != ModeChannelV5 {
		return nil
	}
	if len(d.closeMsg) != 1 {
		return fmt.Errorf("close signal without a channel")
	}
	return d.cfg.Handler.CloseChannel(d.cfg.Direction, int(d.closeMsg[0]))
}

func (d *Decoder) exit(obj []byte) error {
	st, err := stream.ParseStatus(obj)
	if err != nil {
		return fmt.Errorf("status channel: %w", err)
	}
	return d.cfg.Handler.Exit(st)
}

func (d *Decoder) resized(obj []byte) error {
	ts, err := stream.ParseResize(obj)
	if err != nil {
		return fmt.Errorf("resize channel: %w", err)
	}
	return d.cfg.Handler.Resize(ts)
}

func modeName(m Mode) string {
	switch m {
	case ModeChannelV4:
		return ProtocolV4
	case ModeChannelV5:
		return ProtocolV5
	case ModeSPDYTunnel:
		return ProtocolSPDYTunnel
	}
	return fmt.Sprintf("mode %d", int(m))
}
