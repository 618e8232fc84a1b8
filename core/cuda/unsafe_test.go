package cuda_test

import "unsafe"

func unsafeBytes(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
