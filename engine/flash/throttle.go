package flash

import (
	"fmt"
	"sync"
	"time"
)

// Throttle emulates a slower device than the disk underneath, such as phone
// UFS storage: every request occupies a single shared device timeline for
// max(bytes/BytesPerSec, 1/IOPS), and a request completes no earlier than
// its slot ends. The real I/O still happens; the throttle only adds delay,
// so it can make the device slower, never faster. Statistics gathered
// through a throttled file are labelled as emulation.
//
// The model is deliberately simple: one queue, no internal parallelism, so
// a deeper queue does not raise emulated throughput beyond the limits.
type Throttle struct {
	// BytesPerSec and IOPS bound the emulated device; zero means unbounded.
	BytesPerSec float64
	IOPS        float64

	mu   sync.Mutex
	free time.Time // when the emulated device is next idle
}

// NewThrottle returns a throttle for the given limits.
func NewThrottle(bytesPerSec, iops float64) *Throttle {
	return &Throttle{BytesPerSec: bytesPerSec, IOPS: iops}
}

// String is the label statistics carry when the throttle is in use.
func (t *Throttle) String() string {
	return fmt.Sprintf("emulated device (throttle): %.0f MB/s, %.0f IOPS; delays added over real I/O",
		t.BytesPerSec/1e6, t.IOPS)
}

// reserve books n bytes on the emulated timeline starting no earlier than
// start, returning when the request may complete.
func (t *Throttle) reserve(start time.Time, n int64) time.Time {
	var d time.Duration
	if t.BytesPerSec > 0 {
		d = time.Duration(float64(n) / t.BytesPerSec * 1e9)
	}
	if t.IOPS > 0 {
		d = max(d, time.Duration(1e9/t.IOPS))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.free.Before(start) {
		t.free = start
	}
	t.free = t.free.Add(d)
	return t.free
}

// wait sleeps until the booked completion time of a request that began at
// start and moved n bytes.
func (t *Throttle) wait(start time.Time, n int64) {
	if t == nil {
		return
	}
	if d := time.Until(t.reserve(start, n)); d > 0 {
		time.Sleep(d)
	}
}
