package formats

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
)

// TarEntry is one regular file of a tar archive: its name and where its
// contents lie in the archive's bytes.
type TarEntry struct {
	Name   string
	Offset int64
	Size   int64
}

// maxTarEntries bounds the entries listed: each costs 512 bytes of input,
// so this only matters for inputs over 8 GiB.
const maxTarEntries = 1 << 24

// ParseTar lists the regular files of a tar archive (ustar, GNU and PAX
// headers, as archive/tar reads them) in archive order, with the offset and
// size of each one's contents, which the archive holds contiguously.
// Directories, links and other special entries are skipped; sparse files
// are refused (their contents are not one span). An archive that ends
// inside a header or a member's contents is refused as truncated; one that
// ends without the two zero blocks that close it is accepted, as Python's
// tarfile does.
func ParseTar(b []byte) ([]TarEntry, error) {
	if len(b) == 0 {
		return nil, errorf("tar: empty input (0 bytes)")
	}
	r := bytes.NewReader(b)
	tr := tar.NewReader(r)
	var out []TarEntry
	headers := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// archive/tar skips past a last member cut short without a
			// word; its padded contents must be there.
			if n := len(out); n > 0 {
				if e := out[n-1]; (e.Offset+e.Size+511)/512*512 > int64(len(b)) {
					return nil, errorf("tar: truncated archive: member %q ends past the end of the data", e.Name)
				}
			}
			if len(out) == 0 && len(b) >= 512 && !allZero(b[:512]) {
				return nil, errorf("tar: not a tar archive")
			}
			return out, nil
		}
		if err != nil {
			switch {
			case headers == 0:
				return nil, errorf("tar: not a tar archive: %v", err)
			case errors.Is(err, io.ErrUnexpectedEOF):
				return nil, errorf("tar: truncated archive after %d headers", headers)
			case len(out) == 0:
				return nil, errorf("tar: bad header after %d headers: %v", headers, err)
			}
			return nil, errorf("tar: bad header after member %q: %v", out[len(out)-1].Name, err)
		}
		headers++
		switch h.Typeflag {
		case tar.TypeReg: // archive/tar reports old writers' TypeRegA as TypeReg
		case tar.TypeGNUSparse:
			return nil, errorf("tar: member %q is a sparse file (not supported)", h.Name)
		default:
			continue
		}
		off := int64(len(b)) - int64(r.Len())
		if h.Size < 0 || h.Size > int64(len(b))-off {
			return nil, errorf("tar: truncated: member %q declares %d bytes, %d are present", h.Name, h.Size, int64(len(b))-off)
		}
		if len(out) == maxTarEntries {
			return nil, errorf("tar: more than %d members", maxTarEntries)
		}
		out = append(out, TarEntry{Name: h.Name, Offset: off, Size: h.Size})
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
