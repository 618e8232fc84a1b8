package audio_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/spdl-go/spdl-go/core/media/audio"
	"github.com/spdl-go/spdl-go/core/media/av"
)

// flacClips are FLAC layouts the raw path must read as the demuxer does.
var flacClips = []struct {
	name string
	args []string
}{
	{"16-bit stereo 44.1 kHz", []string{"-f", "lavfi", "-i", "aevalsrc=0.4*sin(440*2*PI*t)+0.1*(random(0)-0.5)|0.3*sin(660*2*PI*t):s=44100:d=3", "-c:a", "flac"}},
	{"24-bit mono 48 kHz", []string{"-f", "lavfi", "-i", "aevalsrc=0.5*sin(1000*2*PI*t)+0.05*(random(0)-0.5):s=48000:d=2", "-c:a", "flac", "-sample_fmt", "s32", "-bits_per_raw_sample", "24"}},
	{"fast compression, small blocks", []string{"-f", "lavfi", "-i", "aevalsrc=0.3*sin(300*2*PI*t*(1+t)):s=22050:d=2.5", "-c:a", "flac", "-compression_level", "0", "-frame_size", "576"}},
	{"tags and a cover picture", []string{"-f", "lavfi", "-i", "aevalsrc=0.4*sin(440*2*PI*t):s=16000:d=2", "-f", "lavfi", "-i", "color=c=red:s=64x64:d=1",
		"-map", "0:a", "-map", "1:v", "-c:a", "flac", "-c:v", "png", "-frames:v", "1", "-disposition:v", "attached_pic", "-metadata", "title=raw path"}},
	// The first half compresses to almost nothing: an estimate by average
	// bytes per sample falls short of the second half.
	{"silence then noise", []string{"-f", "lavfi", "-i", "aevalsrc=if(lt(t\\,1.5)\\,0\\,0.8*(random(0)-0.5)):s=44100:d=3", "-c:a", "flac"}},
}

var flacOptions = []audio.Options{
	{},
	{SampleRate: 16000, NumChannels: 1, NumSamples: 20000},
	{NumSamples: 1000},
	{NumSamples: 1_000_000}, // longer than the clip: zero-padded
	{Duration: 0.7},
	{Start: 0.25, Duration: 0.5},
	{Start: 1.9, NumSamples: 2000}, // seeks: the demuxer's path
	{SampleRate: 8000, LowpassFilterWidth: 6, NumChannels: 2},
}

// TestFLACRawIdentical decodes FLAC files with their frames read straight
// from the file and through FFmpeg's demuxer: the samples must be the
// same, bit for bit, and the raw path must have been taken (and not fallen
// back) wherever it applies.
func TestFLACRawIdentical(t *testing.T) {
	checkLeaks(t)
	needFFmpeg(t, "flac")
	dir := t.TempDir()
	for i, c := range flacClips {
		t.Run(c.name, func(t *testing.T) {
			path := ffmpeg(t, dir, "clip"+itoa(i)+".flac", c.args...)
			data := mustRead(t, path)
			for _, o := range flacOptions {
				for _, src := range []av.Source{{Path: path}, {Data: data, Name: "bytes"}} {
					old := audio.SetRaw(false)
					want := decode(t, src, o)
					audio.SetRaw(true)
					uses, falls := audio.RawStats()
					got := decode(t, src, o)
					uses2, falls2 := audio.RawStats()
					audio.SetRaw(old)
					if err := same(got, want); err != "" {
						t.Fatalf("%+v from %v: raw frames and the demuxer differ: %s", o, src, err)
					}
					if wantRaw := o.Start <= 0.5; (uses2 > uses) != wantRaw {
						t.Errorf("%+v: raw path taken %v, want %v", o, uses2 > uses, wantRaw)
					}
					if falls2 != falls {
						t.Errorf("%+v from %v: fell back to the demuxer", o, src)
					}
				}
			}
		})
	}
}

// TestFLACRawFallback checks the ways the raw path gives up: frames that
// run out before the output is full (an estimate too small for a file that
// compresses unevenly), a file cut mid-frame, and corrupt frames. Each
// ends as the demuxer's path would: the same samples, or its error.
func TestFLACRawFallback(t *testing.T) {
	checkLeaks(t)
	needFFmpeg(t, "flac")
	dir := t.TempDir()
	uneven := mustRead(t, ffmpeg(t, dir, "uneven.flac", flacClips[4].args...))
	plain := mustRead(t, ffmpeg(t, dir, "plain.flac", flacClips[0].args...))
	cases := []struct {
		name     string
		b        []byte
		o        audio.Options
		margin   float64 // the estimate's margin, if set
		fallback bool    // must fall back
	}{
		{"estimate short", uneven, audio.Options{NumSamples: 44100 * 2}, 1e-9, true},
		{"cut mid-frame", plain[:len(plain)*2/3], audio.Options{}, 0, true},
		{"cut, output within what is left", plain[:len(plain)*2/3], audio.Options{NumSamples: 44100}, 0, false},
		{"frames flipped", flip(plain, 501), audio.Options{SampleRate: 16000}, 0, false},
		{"a frame header zeroed", zeroAt(plain, len(plain)/2, 64), audio.Options{}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.margin > 0 {
				defer audio.SetFLACMargin(tc.margin, 0)()
			}
			src := av.Source{Data: tc.b, Name: "item 3"}
			old := audio.SetRaw(false)
			want, wantErr := audio.Decode(context.Background(), src, tc.o)
			audio.SetRaw(true)
			_, falls := audio.RawStats()
			got, err := audio.Decode(context.Background(), src, tc.o)
			_, falls2 := audio.RawStats()
			audio.SetRaw(old)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("error %v; through the demuxer: %v", err, wantErr)
			}
			if err == nil {
				defer want.Release()
				defer got.Release()
				if tc.name != "frames flipped" && tc.name != "a frame header zeroed" {
					if d := same(copyOut(t, got), copyOut(t, want)); d != "" {
						t.Fatalf("raw frames and the demuxer differ: %s", d)
					}
				} else {
					// Corrupt frames decode to whatever they hold on either
					// path (FFmpeg checks no frame CRC by default), within
					// [-1, 1], with the same shape.
					g, w := copyOut(t, got), copyOut(t, want)
					if len(g.ch) != len(w.ch) {
						t.Fatalf("%d channels, through the demuxer %d", len(g.ch), len(w.ch))
					}
					for _, ch := range g.ch {
						for _, v := range ch {
							if !(v >= -1 && v <= 1) {
								t.Fatalf("sample %v outside [-1, 1]", v)
							}
						}
					}
				}
			}
			if tc.fallback && falls2 == falls {
				t.Error("did not fall back to the demuxer")
			}
		})
	}
}

func zeroAt(b []byte, at, n int) []byte {
	b = bytes.Clone(b)
	clear(b[at : at+n])
	return b
}
