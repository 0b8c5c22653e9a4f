// Package kernels holds tlite's hand-written OpenCL C kernels, one family per
// .cl file, each with its Go launcher and a pure-Go reference it is tested
// against. Kernels know nothing of graphs: they take buffers, offsets and
// sizes, and the sizes are run-time arguments so that elastic sub-models
// (a prefix of each weight) need no rebuild.
package kernels

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/tlite/tlite/opencl"
)

//go:embed common.cl
var commonSrc string

// Storage is how activations are stored in device memory. Arithmetic is fp32
// either way.
type Storage int

const (
	// F32 stores activations as float32.
	F32 Storage = iota
	// F16 stores activations as IEEE binary16, converted on load and store.
	F16
)

// Size is the number of bytes of one stored element.
func (s Storage) Size() int {
	if s == F16 {
		return 2
	}
	return 4
}

func (s Storage) String() string {
	if s == F16 {
		return "f16"
	}
	return "f32"
}

// define is the build option that selects s in common.cl.
func (s Storage) define() string {
	if s == F16 {
		return "-DSTORAGE_F16"
	}
	return ""
}

// Buf is a tensor argument: an allocation and the element offset at which
// the tensor starts. Offsets instead of sub-buffers let views (a KV-cache
// prefix, a slice of a packed weight) start anywhere, free of the device's
// sub-buffer alignment rule. An allocation of the OpenCL device (*Lib) sets
// Mem; one of the HostDevice sets Host. The zero Buf is "no tensor" (an
// absent bias or mask).
type Buf struct {
	Mem  *opencl.Buffer
	Host []byte
	Off  int
}

// Lib builds kernel programs for one device on first use and keeps them.
// It is not safe for concurrent use, like the queue it launches on.
type Lib struct {
	dev   *opencl.Device
	mu    sync.Mutex
	progs map[string]*opencl.Program
	kerns map[kernKey]*opencl.Kernel

	// devInf is the device's description, read once (infoOnce): launchers
	// consult it at every launch, and the device's Info copies its lists.
	devInf   opencl.Info
	infoOnce sync.Once

	prof   *profile     // forced variant selection (builddump.go), nil = the device's
	as     *opencl.Info // a whole device description tests select variants by, nil = none
	dump   *buildDump   // where builds are recorded, nil = nowhere
	envErr error        // a bad TLITE_KERNEL_* setting, returned by every build

	// fault and faulting are the device-side fault slots (fault.go);
	// label is the last SetLabel, to name a faulting launch.
	fault    *opencl.Buffer
	faulting [faultSlots]faultLaunch
	nfault   int
	// faultTotal counts fault-slot launches ever (FaultLaunches).
	faultTotal int64
	// faultRaw receives the slots at each check, so that a decode step's
	// Finish allocates nothing.
	faultRaw [8 * faultSlots]byte
	label    string
	// attnPart is split-K attention's scratch (attention.go).
	attnPart *opencl.Buffer
	// attnHalfOff turns the GPU attention kernels' half path off
	// (SetAttentionHalf).
	attnHalfOff bool
	// attnEmu builds that half path in its exact emulation
	// (TLITE_KERNEL_HALF_EMU).
	attnEmu bool
	// qImgBroken and mmImgBroken are set when the driver refused an image
	// over a weight: the tiled decode GEMV (qImages) or mm_gemv_c4
	// (mmImages) reads buffers from then on.
	qImgBroken, mmImgBroken bool
}

// kernKey names a built kernel: family, build options as the launcher
// gave them, and kernel name.
type kernKey struct{ family, options, name string }

// New returns a kernel library for dev. Programs are built lazily, so opening
// a session pays only for the families its model uses.
func New(dev *opencl.Device) *Lib {
	l := &Lib{dev: dev, progs: map[string]*opencl.Program{}, kerns: map[kernKey]*opencl.Kernel{}}
	l.configureFromEnv()
	return l
}

// Device is the device the library launches on.
func (l *Lib) Device() *opencl.Device { return l.dev }

// kernel returns kernel name from family's source built with options.
// Programs are keyed by (family, options), so each storage or tile variant is
// compiled once.
func (l *Lib) kernel(family, src, options, name string) (*opencl.Kernel, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The lookup key is a struct of the given strings: a launch builds no
	// key string (this runs at every launch).
	kkey := kernKey{family, options, name}
	if k, ok := l.kerns[kkey]; ok {
		return k, nil
	}
	options = strings.TrimSpace(options)
	pkey := family + "\x00" + options
	if l.envErr != nil {
		return nil, l.envErr
	}
	full := commonSrc + "\n" + src
	// Before the build, so that a program the device rejects is still
	// checked by the gate.
	if err := l.recordBuild(family, full, options, name); err != nil {
		return nil, err
	}
	p, ok := l.progs[pkey]
	if !ok {
		var err error
		p, err = l.dev.Build(full, options)
		if err != nil {
			return nil, fmt.Errorf("kernels: build %s (%s): %w", family, options, err)
		}
		l.progs[pkey] = p
	}
	k, err := p.Kernel(name)
	if err != nil {
		return nil, fmt.Errorf("kernels: %s: kernel %s: %w", family, name, err)
	}
	l.kerns[kkey] = k
	return k, nil
}

// roundUp returns n rounded up to a multiple of m, the global size a launch
// needs when its local size is m; kernels guard the tail themselves.
func roundUp(n, m int) int {
	if m <= 0 {
		return n
	}
	return (n + m - 1) / m * m
}
