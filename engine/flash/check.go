package flash

import "fmt"

// DeviceCheck compares the bytes a Stats says were read from the device
// with the kernel's read_bytes over the same interval: the spec's catch for
// "page-cache flash" (systems-spec §1d risk 1, §2d risk 2). Start it before
// a measured phase and call Verify after. The kernel counter covers the
// whole process, so other I/O in the interval can only make it larger; a
// kernel count below the planned bytes means some reads were served from
// memory.
type DeviceCheck struct {
	st      *Stats
	proc    ProcIO
	devRead int64
}

// StartDeviceCheck snapshots both counters.
func StartDeviceCheck(st *Stats) (*DeviceCheck, error) {
	p, err := ReadProcIO()
	if err != nil {
		return nil, err
	}
	return &DeviceCheck{st: st, proc: p, devRead: st.Snapshot().Read.DeviceBytes}, nil
}

// Verify returns the bytes planned (device bytes recorded by the Stats) and
// the growth of read_bytes since the start, and an error if the kernel saw
// fewer bytes than were planned.
func (c *DeviceCheck) Verify() (planned, kernel int64, err error) {
	p, err := ReadProcIO()
	if err != nil {
		return 0, 0, err
	}
	planned = c.st.Snapshot().Read.DeviceBytes - c.devRead
	kernel = p.ReadBytes - c.proc.ReadBytes
	if kernel < planned {
		return planned, kernel, fmt.Errorf("flash: %d bytes planned from the device but /proc/self/io read_bytes grew by %d: reads were served from memory", planned, kernel)
	}
	return planned, kernel, nil
}
