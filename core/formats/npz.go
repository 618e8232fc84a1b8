package formats

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	kflate "github.com/klauspost/compress/flate"
)

// DefaultMaxUncompressed is load_npz's default limit on the uncompressed
// bytes of an archive (SPDL's default too): 1 GiB.
const DefaultMaxUncompressed = 1 << 30

// NpzEntry is one array of an .npz archive.
type NpzEntry struct {
	// Name is the member's name without its ".npy" suffix (numpy's key).
	Name string
	// Array views Raw, the member's uncompressed bytes.
	Array *Array
}

// ParseNpz reads an .npz archive (a zip of .npy members, stored or
// DEFLATE-compressed, as numpy.savez and savez_compressed write). Before
// inflating anything it adds up the uncompressed sizes the archive
// declares and refuses it when they exceed maxUncompressed; while
// inflating, a member that yields more than it declared is refused too
// (so a lying header cannot get past the limit). Members not named *.npy
// are refused, as numpy would fail to load them as arrays.
func ParseNpz(b []byte, maxUncompressed int64) ([]NpzEntry, error) {
	if len(b) == 0 {
		return nil, errorf("npz: empty input (0 bytes)")
	}
	if maxUncompressed < 0 {
		return nil, fmt.Errorf("npz: max_uncompressed_bytes must be >= 0, got %d", maxUncompressed)
	}
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, errorf("npz: not a zip archive: %v", err)
	}
	// klauspost's inflate is faster than compress/flate's, with the same checks.
	zr.RegisterDecompressor(zip.Deflate, func(r io.Reader) io.ReadCloser { return kflate.NewReader(r) })
	var total uint64
	for _, f := range zr.File {
		total += f.UncompressedSize64
		if total > uint64(maxUncompressed) || total < f.UncompressedSize64 {
			return nil, errorf("npz: the archive declares over %d uncompressed bytes (at member %q), over max_uncompressed_bytes (%d)",
				total, f.Name, maxUncompressed)
		}
		if f.Method != zip.Store && f.Method != zip.Deflate {
			return nil, errorf("npz: member %q uses compression method %d (only stored and DEFLATE are supported)", f.Name, f.Method)
		}
		if !strings.HasSuffix(f.Name, ".npy") {
			return nil, errorf("npz: member %q is not an .npy file", f.Name)
		}
	}
	out := make([]NpzEntry, 0, len(zr.File))
	seen := make(map[string]bool, len(zr.File))
	for _, f := range zr.File {
		name := strings.TrimSuffix(f.Name, ".npy")
		if seen[name] {
			return nil, errorf("npz: member %q appears twice", f.Name)
		}
		seen[name] = true
		raw, err := readMember(f)
		if err != nil {
			return nil, err
		}
		a, err := ParseNpy(raw)
		if err != nil {
			return nil, fmt.Errorf("npz: member %q: %w", f.Name, err)
		}
		out = append(out, NpzEntry{Name: name, Array: a})
	}
	return out, nil
}

// readMember inflates one member, no more than its declared size.
func readMember(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, errorf("npz: member %q: %v", f.Name, err)
	}
	defer rc.Close()
	// Declared sizes were checked against the limit; the buffer starts
	// small and grows with what the member really yields, so a false size
	// costs nothing.
	var buf bytes.Buffer
	buf.Grow(int(min(f.UncompressedSize64, 1<<20)) + 512) // grows on with what it really yields
	n, err := io.Copy(&buf, io.LimitReader(rc, int64(f.UncompressedSize64)+1))
	switch {
	case err != nil && errors.Is(err, zip.ErrChecksum):
		return nil, errorf("npz: member %q: checksum mismatch (corrupt data)", f.Name)
	case err != nil:
		return nil, errorf("npz: member %q: %v", f.Name, err)
	case uint64(n) != f.UncompressedSize64:
		return nil, errorf("npz: member %q yields %d bytes but declares %d", f.Name, n, f.UncompressedSize64)
	}
	return buf.Bytes(), nil
}
