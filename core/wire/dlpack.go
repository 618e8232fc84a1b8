package wire

// #include "../tensor/dlpack.h"
// static void call_versioned_deleter(void *p) {
//   DLManagedTensorVersioned *m = p;
//   if (m->deleter) m->deleter(m);
// }
// static void call_legacy_deleter(void *p) {
//   DLManagedTensor *m = p;
//   if (m->deleter) m->deleter(m);
// }
import "C"

import (
	"unsafe"

	"github.com/spdl-go/spdl-go/core/tensor"
)

// importDLPack adopts a DLPack tensor that Python handed over. If it cannot
// be imported (a GPU tensor, say), its producer's deleter runs here, since
// ownership already moved to Go.
func importDLPack(p unsafe.Pointer, versioned bool) (*tensor.Tensor, error) {
	var t *tensor.Tensor
	var err error
	if versioned {
		if t, err = tensor.FromDLPackVersioned(p); err != nil {
			C.call_versioned_deleter(p)
		}
	} else {
		if t, err = tensor.FromDLPackLegacy(p); err != nil {
			C.call_legacy_deleter(p)
		}
	}
	return t, err
}
