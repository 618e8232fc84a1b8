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
	CC     *astiav.CodecContext
	Stream *astiav.Stream
	in     *Input
	frame  *astiav.Frame
	sent   bool // the end-of-stream flush packet went to the decoder
	done   bool

	// Skip, if set, is asked about each packet of the stream before it is
	// sent, with the packets read ahead of it (DecoderOptions.Lookahead;
	// they follow it in decoding order). true lets the codec drop the
	// packet's frame if no other frame references it (FFmpeg's
	// AVDISCARD_NONREF, for that packet only): such a frame is never
	// returned. The packets are the Decoder's, valid during the call.
	Skip func(pkt *astiav.Packet, ahead []*astiav.Packet) bool

	lookahead int
	queue     []*astiav.Packet // stream packets read ahead, in order
	spare     []*astiav.Packet // empty packets to read into
	readErr   error            // why reading ahead stopped (io.EOF at the end)
	skipping  bool             // skip_frame is NONREF now
	fedDTS    int64            // decoding timestamp of the last packet sent

	raw     *astiav.Packet // SetRaw's packet, until it is sent
	rawMode bool
}

// DecoderOptions tune OpenDecoder.
type DecoderOptions struct {
	// Threads for the codec; 0 lets FFmpeg choose. Pipelines decode many
	// items at once, so 1 is usually best for images and audio.
	Threads int
	// Lookahead is how many packets of the stream to read ahead of the
	// one being sent, for Decoder.Skip to look at; 0 reads none ahead.
	Lookahead int
}

// OpenDecoder opens a decoder for st.
func (in *Input) OpenDecoder(st *astiav.Stream, opts DecoderOptions) (d *Decoder, err error) {
	par := st.CodecParameters()
	codec := astiav.FindDecoder(par.CodecID())
	if codec == nil {
		return nil, Errorf(in.src, "open", "no decoder for codec %q in this FFmpeg build", par.CodecID().Name())
	}
	d = &Decoder{Stream: st, in: in, lookahead: max(opts.Lookahead, 0), fedDTS: astiav.NoPtsValue}
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
	d.CC.SetThreadCount(opts.Threads)
	if err = d.CC.Open(codec, nil); err != nil {
		return d, wrap(in.src, "open", fmt.Errorf("opening the %s decoder: %w", codec.Name(), err))
	}
	d.frame = astiav.AllocFrame()
	if d.frame == nil {
		return d, Errorf(in.src, "open", "out of memory allocating a frame")
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

// SetRaw makes the Decoder send the codec one packet of n bytes, which
// write fills (its argument is the packet's C memory, valid during the
// call), and then the end of the stream, instead of the demuxer's
// packets. It is for codecs whose decoder finds where each frame ends
// and decodes a packet of many frames one frame per call (FLAC): their
// demuxers run a parser that checks candidate frame boundaries with CRCs
// over every byte, which for FLAC costs a tenth of decoding. Frames come
// without timestamps. Call it before the first Next.
func (d *Decoder) SetRaw(n int, write func([]byte) error) error {
	p := astiav.AllocPacket()
	if p == nil {
		return Errorf(d.in.src, "read", "out of memory allocating a packet")
	}
	// av_new_packet zeroes the padding the codec's bit reader may read past the end.
	if err := p.AllocPayload(n); err != nil {
		p.Free()
		return wrap(d.in.src, "read", fmt.Errorf("allocating a %d-byte packet: %w", n, err))
	}
	if err := write(payload(p)); err != nil {
		p.Free()
		return wrap(d.in.src, "read", err)
	}
	p.SetStreamIndex(d.Stream.Index())
	d.raw, d.rawMode = p, true
	return nil
}

// feed sends the next packet of this stream (or the final flush) to the decoder.
func (d *Decoder) feed() error {
	if d.rawMode {
		if p := d.raw; p != nil {
			d.raw = nil
			defer p.Free()
			if err := d.CC.SendPacket(p); err != nil {
				return wrap(d.in.src, "decode", err)
			}
			return nil
		}
		d.sent = true
		if err := d.CC.SendPacket(nil); err != nil && !errors.Is(err, astiav.ErrEof) {
			return wrap(d.in.src, "decode", err)
		}
		return nil
	}
	d.fill()
	if len(d.queue) == 0 {
		if !errors.Is(d.readErr, io.EOF) {
			return wrap(d.in.src, "read", d.readErr)
		}
		d.sent = true
		if err := d.CC.SendPacket(nil); err != nil && !errors.Is(err, astiav.ErrEof) {
			return wrap(d.in.src, "decode", err)
		}
		return nil
	}
	pkt := d.queue[0]
	d.queue = d.queue[1:]
	defer func() {
		pkt.Unref()
		d.spare = append(d.spare, pkt)
	}()
	if skip := d.Skip != nil && d.Skip(pkt, d.queue); skip != d.skipping {
		// skip_frame is read when the packet is decoded, which
		// avcodec_send_packet does at once: the decoder has no frame
		// waiting (Next only feeds after receive_frame said EAGAIN).
		d.skipping = skip
		level := DiscardDefault
		if skip {
			level = DiscardNonRef
		}
		setSkipFrame(d.CC, level)
	}
	d.fedDTS = pkt.Dts()
	if err := d.CC.SendPacket(pkt); err != nil && !errors.Is(err, astiav.ErrEagain) {
		return wrap(d.in.src, "decode", err)
	}
	return nil
}

// fill reads packets of the stream until Lookahead are queued behind the
// next one, or reading ends (readErr says why).
func (d *Decoder) fill() {
	for d.readErr == nil && len(d.queue) <= d.lookahead {
		var p *astiav.Packet
		if n := len(d.spare); n > 0 {
			p, d.spare = d.spare[n-1], d.spare[:n-1]
		} else if p = astiav.AllocPacket(); p == nil {
			d.readErr = errors.New("out of memory allocating a packet")
			return
		}
		err := d.in.FC.ReadFrame(p)
		switch {
		case errors.Is(err, astiav.ErrEof) || errors.Is(err, io.EOF):
			d.readErr = io.EOF
		case err != nil:
			d.readErr = err
		case p.StreamIndex() == d.Stream.Index():
			d.queue = append(d.queue, p)
			continue
		}
		p.Unref()
		d.spare = append(d.spare, p)
	}
}

// FedDTS is the decoding timestamp of the last packet sent to the codec
// (astiav.NoPtsValue before the first, and after Flush).
func (d *Decoder) FedDTS() int64 { return d.fedDTS }

// Flush drops buffered frames and packets read ahead and resets the
// decoder, after a seek.
func (d *Decoder) Flush() error {
	d.frame.Unref()
	d.sent, d.done = false, false
	for _, p := range d.queue {
		p.Unref()
		d.spare = append(d.spare, p)
	}
	d.queue, d.readErr, d.fedDTS = d.queue[:0], nil, astiav.NoPtsValue
	flushBuffers(d.CC)
	return nil
}

// Close frees the decoder. Safe to call twice.
func (d *Decoder) Close() {
	if d.raw != nil {
		d.raw.Free()
		d.raw = nil
	}
	if d.frame != nil {
		d.frame.Free()
		d.frame = nil
	}
	for _, p := range append(d.queue, d.spare...) {
		p.Free()
	}
	d.queue, d.spare = nil, nil
	if d.CC != nil {
		d.CC.Free()
		d.CC = nil
	}
}
