package av

import (
	"errors"
	"fmt"
	"io"

	"github.com/asticode/go-astiav"
)

// Decoder decodes one stream of an Input, frame by frame. It is not safe
// for concurrent use; Close frees it (the Input stays open).
type Decoder struct {
	CC      *astiav.CodecContext
	Stream  *astiav.Stream
	in      *Input
	pkt     *astiav.Packet
	frame   *astiav.Frame
	sent    bool // the end-of-stream flush packet went to the decoder
	done    bool
	threads int
}

// DecoderOptions tune OpenDecoder.
type DecoderOptions struct {
	// Threads for the codec; 0 lets FFmpeg choose. Pipelines decode many
	// items at once, so 1 is usually best for images and audio.
	Threads int
}

// OpenDecoder opens a decoder for st.
func (in *Input) OpenDecoder(st *astiav.Stream, opts DecoderOptions) (d *Decoder, err error) {
	par := st.CodecParameters()
	codec := astiav.FindDecoder(par.CodecID())
	if codec == nil {
		return nil, Errorf(in.src, "open", "no decoder for codec %q in this FFmpeg build", par.CodecID().Name())
	}
	d = &Decoder{Stream: st, in: in}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	if d.CC = astiav.AllocCodecContext(codec); d.CC == nil {
		return d, Errorf(in.src, "open", "out of memory allocating a %s decoder", codec.Name())
	}
	if err = par.ToCodecContext(d.CC); err != nil {
		return d, wrap(in.src, "open", fmt.Errorf("%s decoder parameters: %w", codec.Name(), err))
	}
	d.threads = opts.Threads
	d.CC.SetThreadCount(opts.Threads)
	if err = d.CC.Open(codec, nil); err != nil {
		return d, wrap(in.src, "open", fmt.Errorf("opening the %s decoder: %w", codec.Name(), err))
	}
	d.pkt = astiav.AllocPacket()
	d.frame = astiav.AllocFrame()
	if d.pkt == nil || d.frame == nil {
		return d, Errorf(in.src, "open", "out of memory allocating a packet or frame")
	}
	return d, nil
}

// Next returns the next decoded frame, which the Decoder owns and reuses:
// it is valid until the next call to Next, Flush or Close. At the end of
// the stream it returns io.EOF.
func (d *Decoder) Next() (*astiav.Frame, error) {
	if d.done {
		return nil, io.EOF
	}
	d.frame.Unref()
	for {
		err := d.CC.ReceiveFrame(d.frame)
		switch {
		case err == nil:
			return d.frame, nil
		case errors.Is(err, astiav.ErrEof):
			d.done = true
			return nil, io.EOF
		case !errors.Is(err, astiav.ErrEagain):
			return nil, wrap(d.in.src, "decode", err)
		}
		// The decoder wants input.
		if d.sent {
			d.done = true
			return nil, io.EOF
		}
		if err := d.feed(); err != nil {
			return nil, err
		}
	}
}

// feed sends the next packet of this stream (or the final flush) to the decoder.
func (d *Decoder) feed() error {
	for {
		d.pkt.Unref()
		err := d.in.FC.ReadFrame(d.pkt)
		if errors.Is(err, astiav.ErrEof) || errors.Is(err, io.EOF) {
			d.sent = true
			if err := d.CC.SendPacket(nil); err != nil && !errors.Is(err, astiav.ErrEof) {
				return wrap(d.in.src, "decode", err)
			}
			return nil
		}
		if err != nil {
			return wrap(d.in.src, "read", err)
		}
		if d.pkt.StreamIndex() != d.Stream.Index() {
			continue
		}
		err = d.CC.SendPacket(d.pkt)
		d.pkt.Unref()
		if err != nil && !errors.Is(err, astiav.ErrEagain) {
			return wrap(d.in.src, "decode", err)
		}
		return nil
	}
}

// Flush drops buffered frames and resets the decoder, after a seek. (The
// go-astiav release that builds against FFmpeg 5.1 has no
// avcodec_flush_buffers, so the codec context is reopened; that costs
// about as much as opening the stream's decoder, once per seek.)
func (d *Decoder) Flush() error {
	d.frame.Unref()
	d.sent, d.done = false, false
	codec := astiav.FindDecoder(d.Stream.CodecParameters().CodecID())
	cc := astiav.AllocCodecContext(codec)
	if cc == nil {
		return Errorf(d.in.src, "seek", "out of memory reopening the decoder")
	}
	if err := d.Stream.CodecParameters().ToCodecContext(cc); err != nil {
		cc.Free()
		return wrap(d.in.src, "seek", err)
	}
	cc.SetThreadCount(d.threads)
	if err := cc.Open(codec, nil); err != nil {
		cc.Free()
		return wrap(d.in.src, "seek", err)
	}
	d.CC.Free()
	d.CC = cc
	return nil
}

// Close frees the decoder. Safe to call twice.
func (d *Decoder) Close() {
	if d.frame != nil {
		d.frame.Free()
		d.frame = nil
	}
	if d.pkt != nil {
		d.pkt.Free()
		d.pkt = nil
	}
	if d.CC != nil {
		d.CC.Free()
		d.CC = nil
	}
}
