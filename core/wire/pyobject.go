package wire

import (
	"fmt"
	"sync/atomic"
)

// PyObject refers to a Python object held in the Python side's registry.
// Go cannot look inside it; native ops that need data must receive
// structured values instead. Release hands the entry back to Python so
// the object can be collected.
type PyObject struct {
	ID       uint64
	release  func(id uint64)
	released atomic.Bool
}

// NewPyObject wraps registry entry id; release is called once when Go drops it.
func NewPyObject(id uint64, release func(uint64)) *PyObject {
	return &PyObject{ID: id, release: release}
}

// Release drops the registry entry. Safe to call more than once.
func (o *PyObject) Release() {
	if o.released.Swap(true) {
		return
	}
	if o.release != nil {
		o.release(o.ID)
	}
}

// detach marks the reference as handed over, so a later Release is a no-op.
func (o *PyObject) detach() { o.released.Store(true) }

func (o *PyObject) String() string { return fmt.Sprintf("<python object #%d>", o.ID) }
