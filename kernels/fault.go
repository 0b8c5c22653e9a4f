package kernels

import (
	"encoding/binary"
	"fmt"

	"github.com/tlite/tlite/opencl"
)

// Device-side faults. A kernel that finds an input it cannot honour (a
// Gather index out of range) has no error to return: the launch was
// enqueued long before it ran. Such kernels take a slot of a small fault
// buffer instead and mark it; Finish reads the slots of the launches since
// the last Finish and turns a mark into an error naming the launch.

// faultSlots is the number of launches between two Finishes whose faults
// are told apart; later launches share slots (a fault is still reported,
// against one of the launches sharing the slot).
const faultSlots = 256

// faultLaunch describes a launch that holds a fault slot.
type faultLaunch struct {
	op    string
	label string
	size  int // the indexed axis' size
}

// faultSlot returns the fault buffer and the slot of a new launch of op
// indexing an axis of size.
func (l *Lib) faultSlot(op string, size int) (*opencl.Buffer, int32, error) {
	if l.fault == nil {
		b, err := l.dev.Alloc(2 * 4 * faultSlots)
		if err != nil {
			return nil, 0, fmt.Errorf("kernels: %s: fault buffer: %w", op, err)
		}
		if err := l.dev.Write(b, 0, make([]byte, 2*4*faultSlots)); err != nil {
			b.Release()
			return nil, 0, fmt.Errorf("kernels: %s: fault buffer: %w", op, err)
		}
		l.fault = b
	}
	slot := l.nfault % faultSlots
	l.faulting[slot] = faultLaunch{op: op, label: l.label, size: size}
	l.nfault++
	l.faultTotal++
	return l.fault, int32(slot), nil
}

// FaultLaunches counts the launches that took a fault slot since the
// library was made. Such a launch must not be replayed from a recording
// (opencl.Recording): the slot's bookkeeping is made at launch.
func (l *Lib) FaultLaunches() int64 { return l.faultTotal }

// checkFaults reads the slots of the launches since the last check, after
// the queue finished, clears them, and returns an error for the first
// marked one.
func (l *Lib) checkFaults() error {
	if l.nfault == 0 {
		return nil
	}
	n := min(l.nfault, faultSlots)
	l.nfault = 0
	raw := l.faultRaw[:8*n]
	if err := l.dev.Read(l.fault, 0, raw); err != nil {
		return fmt.Errorf("kernels: reading the fault buffer: %w", err)
	}
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint32(raw[8*i:]) == 0 {
			continue
		}
		if err := l.dev.Write(l.fault, 0, make([]byte, 8*n)); err != nil {
			return fmt.Errorf("kernels: clearing the fault buffer: %w", err)
		}
		f := l.faulting[i]
		k := int64(int32(binary.LittleEndian.Uint32(raw[8*i+4:])))
		err := indexError(f.op, k, f.size)
		if f.label != "" {
			err = fmt.Errorf("%s: %w", f.label, err)
		}
		return err
	}
	return nil
}

// indexError is an index outside [-size, size) of a gathered axis.
func indexError(op string, k int64, size int) error {
	return fmt.Errorf("kernels: %s: index %d is out of range for an axis of size %d (valid: %d to %d)", op, k, size, -size, size-1)
}
