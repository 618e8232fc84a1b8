// Package testhelp builds and inspects DLPack structs from C for the tests
// of package tensor (cgo is not allowed in _test.go files).
package testhelp

/*
#cgo CFLAGS: -I${SRCDIR}/../.. -std=gnu11
#include <stdatomic.h>
#include <stdlib.h>
#include "dlpack.h"

// A foreign tensor: float32 data 0, 1, 2, ... and a flag its deleter sets.
typedef struct {
  atomic_int deleted;
} th_flag;

typedef struct {
  DLManagedTensorVersioned m;
  int64_t shape[8];
  float data[64];
} th_versioned;

typedef struct {
  DLManagedTensor m;
  int64_t shape[8];
  float data[64];
} th_legacy;

static void th_versioned_deleter(DLManagedTensorVersioned* self) {
  atomic_fetch_add(&((th_flag*)self->manager_ctx)->deleted, 1);
  free(self);
}

static void th_legacy_deleter(DLManagedTensor* self) {
  atomic_fetch_add(&((th_flag*)self->manager_ctx)->deleted, 1);
  free(self);
}

static void th_fill(DLTensor* t, int64_t* shape, float* data, int ndim, const int64_t* dims, int device, int64_t offset) {
  for (int i = 0; i < ndim; i++) shape[i] = dims[i];
  if (ndim > 0 && dims[ndim] != 0) t->strides = shape + ndim;  // dims holds shape then strides, if given
  for (int i = 0; i < ndim && t->strides != NULL; i++) t->strides[i] = dims[ndim + i];
  for (int64_t i = 0; i < 64; i++) data[i] = (float)(i - offset);
  t->data = data;
  t->byte_offset = (uint64_t)offset * sizeof(float);
  t->device.device_type = (DLDeviceType)device;
  t->device.device_id = 0;
  t->ndim = ndim;
  t->dtype.code = kDLFloat;
  t->dtype.bits = 32;
  t->dtype.lanes = 1;
  t->shape = shape;
}

static th_flag* th_new_flag(void) { return calloc(1, sizeof(th_flag)); }
static int th_deleted(th_flag* f) { return atomic_load(&f->deleted); }

static DLManagedTensorVersioned* th_new_versioned(th_flag* f, int ndim, const int64_t* dims, int device, uint32_t major, uint64_t flags, int64_t offset) {
  th_versioned* v = calloc(1, sizeof(th_versioned));
  v->m.version.major = major;
  v->m.version.minor = 0;
  v->m.manager_ctx = f;
  v->m.deleter = th_versioned_deleter;
  v->m.flags = flags;
  th_fill(&v->m.dl_tensor, v->shape, v->data, ndim, dims, device, offset);
  return &v->m;
}

static DLManagedTensor* th_new_legacy(th_flag* f, int ndim, const int64_t* dims, int device, int64_t offset) {
  th_legacy* v = calloc(1, sizeof(th_legacy));
  v->m.manager_ctx = f;
  v->m.deleter = th_legacy_deleter;
  th_fill(&v->m.dl_tensor, v->shape, v->data, ndim, dims, device, offset);
  return &v->m;
}

static void th_call_versioned(DLManagedTensorVersioned* m) { m->deleter(m); }
static void th_call_legacy(DLManagedTensor* m) { m->deleter(m); }
*/
import "C"

import (
	"slices"
	"unsafe"
)

// Foreign is a hand-built DLPack tensor of at most 64 float32 elements
// whose data are 0, 1, 2, ... and whose deleter counts its calls.
type Foreign struct {
	Ptr  unsafe.Pointer // DLManagedTensorVersioned* or DLManagedTensor*
	flag *C.th_flag
}

// Opts shape a Foreign tensor.
type Opts struct {
	Shape    []int64 // at most 4 dimensions, at most 64 elements
	Strides  []int64 // in elements; nil leaves DLTensor.strides NULL
	Device   int32   // DLPack device type; 0 means CPU (1)
	Major    uint32  // versioned only; 0 means 1
	ReadOnly bool    // versioned only
	Offset   int64   // byte_offset, in elements
}

func (o Opts) dev() C.int {
	if o.Device == 0 {
		return 1
	}
	return C.int(o.Device)
}

// dims lays out shape, then strides (or zeros, meaning none), for th_fill.
func (o Opts) dims() *C.int64_t {
	d := make([]int64, 2*len(o.Shape)+1)
	copy(d, o.Shape)
	copy(d[len(o.Shape):], o.Strides)
	return (*C.int64_t)(unsafe.Pointer(&d[0]))
}

// NewVersioned builds a DLManagedTensorVersioned.
func NewVersioned(o Opts) *Foreign {
	f := &Foreign{flag: C.th_new_flag()}
	major := o.Major
	if major == 0 {
		major = 1
	}
	var flags C.uint64_t
	if o.ReadOnly {
		flags = C.DLPACK_FLAG_BITMASK_READ_ONLY
	}
	f.Ptr = unsafe.Pointer(C.th_new_versioned(f.flag, C.int(len(o.Shape)), o.dims(), o.dev(), C.uint32_t(major), flags, C.int64_t(o.Offset)))
	return f
}

// NewLegacy builds a DLManagedTensor.
func NewLegacy(o Opts) *Foreign {
	f := &Foreign{flag: C.th_new_flag()}
	f.Ptr = unsafe.Pointer(C.th_new_legacy(f.flag, C.int(len(o.Shape)), o.dims(), o.dev(), C.int64_t(o.Offset)))
	return f
}

// Deleted is how many times the deleter ran.
func (f *Foreign) Deleted() int { return int(C.th_deleted(f.flag)) }

// Free frees the flag (after the deleter ran).
func (f *Foreign) Free() { C.free(unsafe.Pointer(f.flag)) }

// Versioned is what a consumer sees in a DLManagedTensorVersioned.
type Versioned struct {
	Major, Minor uint32
	Flags        uint64
	Data         unsafe.Pointer
	Device       int32
	Shape        []int64
	Strides      []int64
	ByteOffset   uint64
	Code, Bits   uint8
	Lanes        uint16
}

// ReadVersioned reads a DLManagedTensorVersioned*.
func ReadVersioned(p unsafe.Pointer) Versioned {
	m := (*C.DLManagedTensorVersioned)(p)
	v := Versioned{Major: uint32(m.version.major), Minor: uint32(m.version.minor), Flags: uint64(m.flags)}
	fillView(&v, &m.dl_tensor)
	return v
}

// ReadLegacy reads a DLManagedTensor* (Major, Minor and Flags stay 0).
func ReadLegacy(p unsafe.Pointer) Versioned {
	var v Versioned
	fillView(&v, &(*C.DLManagedTensor)(p).dl_tensor)
	return v
}

func fillView(v *Versioned, t *C.DLTensor) {
	n := int(t.ndim)
	v.Data = t.data
	v.Device = int32(t.device.device_type)
	v.ByteOffset = uint64(t.byte_offset)
	v.Code, v.Bits, v.Lanes = uint8(t.dtype.code), uint8(t.dtype.bits), uint16(t.dtype.lanes)
	if n > 0 {
		v.Shape = slices.Clone(unsafe.Slice((*int64)(unsafe.Pointer(t.shape)), n))
		if t.strides != nil {
			v.Strides = slices.Clone(unsafe.Slice((*int64)(unsafe.Pointer(t.strides)), n))
		}
	}
}

// CallVersionedDeleter calls a DLManagedTensorVersioned's deleter, as a
// consumer does when it is done.
func CallVersionedDeleter(p unsafe.Pointer) { C.th_call_versioned((*C.DLManagedTensorVersioned)(p)) }

// CallLegacyDeleter calls a DLManagedTensor's deleter.
func CallLegacyDeleter(p unsafe.Pointer) { C.th_call_legacy((*C.DLManagedTensor)(p)) }
