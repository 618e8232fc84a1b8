package img

// TJAnchor is tjAnchor for the benchmarks in package img_test.
type TJAnchor = tjAnchor

// NewTJAnchor is newTJAnchor.
func NewTJAnchor(files [][]byte, maxPixels int) (*TJAnchor, error) {
	return newTJAnchor(files, maxPixels)
}

// Run decodes every file once.
func (a *tjAnchor) Run() error { return a.run() }

// Free frees the anchor's C memory.
func (a *tjAnchor) Free() { a.free() }

// TJReference is tjReference.
func TJReference(data []byte, mode Mode) ([]byte, int, int, error) { return tjReference(data, mode) }
