// Package opencl is tlite's device runtime: one OpenCL device with one
// in-order queue, buffers and sub-buffers, programs built through a binary
// cache, kernel launches and event profiling.
//
// The OpenCL library is loaded at run time (loader.h): a binary without any
// OpenCL installed still starts, and Open says how to get a device. It is
// looked for as libOpenCL.so.1 / libOpenCL.so, in the /vendor paths of
// phones, or at $TLITE_OPENCL_LIB. $TLITE_DEVICE selects the device when
// Options.Select is empty.
//
// The runtime has its own small cgo layer (loader.h, shim.h) rather than
// github.com/jgillich/go-opencl: that package keeps its handles in
// unexported fields, truncates info strings at 1 KiB (GPU extension lists
// are longer), releases objects from finalizers, links libOpenCL at build
// time, and lacks sub-buffers, queue properties, program binaries and a real
// clFlush, which are the calls this runtime is about.
//
// A Device is safe for concurrent use; commands from concurrent callers
// interleave on its single in-order queue. A Kernel holds its arguments, so
// goroutines that launch concurrently should each use their own Kernel
// (Program.Kernel returns a new one per call).
package opencl

/*
#cgo CFLAGS: -O2
#cgo linux LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// Priority is a queue priority hint.
type Priority int

const (
	// PriorityDefault leaves scheduling to the driver.
	PriorityDefault Priority = iota
	// PriorityLow asks the device to favour other work (e.g. the UI).
	PriorityLow
	// PriorityHigh asks the device to favour this queue.
	PriorityHigh
)

func (p Priority) String() string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityHigh:
		return "high"
	}
	return "default"
}

// Options select and configure the device Open returns.
type Options struct {
	// Select picks the device: "" = $TLITE_DEVICE if set, else the first GPU,
	// else the first device; "gpu", "cpu" or "accelerator" = the first of
	// that type; "P:D" = platform P, device D as List numbers them; anything
	// else = the first device whose name contains it, ignoring case.
	Select string
	// Priority is a queue priority hint, applied when the device has a known
	// extension for it and silently left at the default otherwise;
	// Info().Priority says what was applied.
	Priority Priority
	// Profile enables event profiling: Launch records an event per kernel
	// and Profile returns their device timestamps.
	Profile bool
	// CacheDir holds compiled program binaries: "" = os.UserCacheDir()/tlite/kernels
	// (os.TempDir()/tlite/kernels when there is none), "-" = no cache.
	CacheDir string
}

// Info describes a device and what Open applied to it.
type Info struct {
	Index         string // "P:D": platform and device index, usable as Options.Select
	Platform      string // platform name
	Name          string
	Vendor        string
	Version       string // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 ..."
	Driver        string // CL_DRIVER_VERSION
	OpenCLC       string // CL_DEVICE_OPENCL_C_VERSION
	Type          string // "GPU", "CPU", "ACCELERATOR" or "OTHER"
	ComputeUnits  int
	GlobalMem     int64 // bytes
	MaxAlloc      int64 // largest single buffer, bytes
	LocalMem      int64 // __local memory per work-group, bytes
	MaxWorkGroup  int   // work-items per work-group
	MaxWorkItem   []int // per-dimension work-group limits
	BaseAddrAlign int   // sub-buffer offset alignment, bytes
	// Unified is true when device and host share memory (CPU devices, most
	// phone GPUs), where AllocHost over a mapped file avoids a copy.
	Unified bool
	// FP16 is cl_khr_fp16: half arithmetic compiles. Without it half is a
	// storage format only (vload_half/vstore_half).
	FP16 bool
	// Subgroups is cl_khr_subgroups, cl_intel_subgroups, or an OpenCL 2.1+
	// device reporting a non-zero CL_DEVICE_MAX_NUM_SUB_GROUPS.
	Subgroups bool
	// ImageFromBuffer is cl_khr_image2d_from_buffer or, on OpenCL 3.0, a
	// non-zero CL_DEVICE_IMAGE_PITCH_ALIGNMENT on a device with images.
	ImageFromBuffer bool
	// PriorityExt is the priority extension the device has: "khr"
	// (cl_khr_priority_hints, queue property; this is also how Arm Mali
	// exposes priorities, Arm having no vendor priority extension), "qcom"
	// (cl_qcom_priority_hint, context property) or "".
	PriorityExt string
	// Priority is the priority Open applied: "low" or "high" when a hint
	// reached the driver, "default" otherwise (List always says "default").
	Priority   string
	Extensions []string
}

// Device is an open OpenCL device with one in-order command queue.
type Device struct {
	mu       sync.Mutex
	info     Info
	platform C.cl_platform_id
	id       C.cl_device_id
	ctx      C.cl_context
	queue    C.cl_command_queue
	cacheDir string // "" = no cache
	profile  bool
	closed   bool

	label string
	// Launch's scratch space, reused so that a launch allocates nothing.
	// Separate slices, because cgo forbids passing C a pointer into memory
	// that holds Go pointers (as Device does).
	args    []C.tl_arg
	sizes   []C.size_t // global sizes, then local sizes from index 3
	ev      []C.cl_event
	bad     []C.int // tl_launch's failing argument index
	pending []pendingLaunch
	done    []Record
	base    uint64 // device time of the first profiled start
	hasBase bool

	stats Stats
	// live objects, released by Close
	buffers  map[*Buffer]struct{}
	programs map[*Program]struct{}
}

// fixHint is how to get a device at all, appended to errors that mean there
// is none.
const fixHint = "install an OpenCL driver (for a CPU device: apt-get install pocl-opencl-icd ocl-icd-opencl-dev), or use the pure-Go CPU backend with --device go"

type devRef struct {
	platform C.cl_platform_id
	id       C.cl_device_id
	index    string
}

var (
	loadMu sync.Mutex
	loaded bool
)

// libraries are the places an OpenCL library is looked for, in order:
// the ICD loader on desktop systems, the vendor driver itself on phones
// (Adreno and Mali ship libOpenCL.so in /vendor; some Mali drivers only as
// libGLES_mali.so; Pixels as libOpenCL-pixel.so).
func libraries() []string {
	if p := os.Getenv("TLITE_OPENCL_LIB"); p != "" {
		return []string{p}
	}
	switch runtime.GOOS {
	case "darwin":
		return []string{"/System/Library/Frameworks/OpenCL.framework/OpenCL"}
	case "android":
		lib := "lib64"
		if unsafe.Sizeof(uintptr(0)) == 4 {
			lib = "lib"
		}
		var c []string
		c = append(c, "libOpenCL.so")
		for _, dir := range []string{"/vendor/" + lib, "/system/vendor/" + lib, "/system/" + lib} {
			c = append(c, dir+"/libOpenCL.so", dir+"/libOpenCL-pixel.so", dir+"/egl/libGLES_mali.so")
		}
		return c
	}
	return []string{"libOpenCL.so.1", "libOpenCL.so"}
}

// loadFrom loads the first of paths that is an OpenCL library. With publish
// false it only checks them.
func loadFrom(paths []string, publish bool) error {
	var tried []string
	buf := make([]byte, 512)
	pub := C.int(0)
	if publish {
		pub = 1
	}
	for _, p := range paths {
		cp := C.CString(p)
		rc := C.tl_load(cp, pub, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		C.free(unsafe.Pointer(cp))
		if rc == 0 {
			return nil
		}
		tried = append(tried, C.GoString((*C.char)(unsafe.Pointer(&buf[0]))))
	}
	return fmt.Errorf("opencl: no OpenCL library could be loaded (%s): %s, or set TLITE_OPENCL_LIB to the driver's library", strings.Join(tried, "; "), fixHint)
}

// load makes the OpenCL functions callable. A failure is not remembered, so
// a later call sees a driver installed meanwhile.
func load() error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded {
		return nil
	}
	// PoCL compiles every kernel again for each new local size unless this is
	// off; measured here, a cold kernel test run took 3m25s with it and 52 s
	// without, at the same kernel speed. It must be set before the driver
	// reads its environment, and a user's own setting wins.
	if _, set := os.LookupEnv("POCL_WORK_GROUP_SPECIALIZATION"); !set {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	if err := loadFrom(libraries(), true); err != nil {
		return err
	}
	loaded = true
	return nil
}

// enumerate lists every device of every platform.
func enumerate() ([]devRef, error) {
	if err := load(); err != nil {
		return nil, err
	}
	var n C.cl_uint
	code := C.tl_clGetPlatformIDs(0, nil, &n)
	if code == -1001 || (code == C.CL_SUCCESS && n == 0) {
		return nil, fmt.Errorf("opencl: no OpenCL platform found (the ICD loader found no driver): %s", fixHint)
	}
	if code != C.CL_SUCCESS {
		return nil, fmt.Errorf("%w: %s", clErr("clGetPlatformIDs", code), fixHint)
	}
	plats := make([]C.cl_platform_id, n)
	if err := clErr("clGetPlatformIDs", C.tl_clGetPlatformIDs(n, &plats[0], nil)); err != nil {
		return nil, err
	}
	var refs []devRef
	for pi, p := range plats {
		var nd C.cl_uint
		code := C.tl_clGetDeviceIDs(p, C.CL_DEVICE_TYPE_ALL, 0, nil, &nd)
		if code == C.CL_DEVICE_NOT_FOUND || nd == 0 {
			continue
		}
		if code != C.CL_SUCCESS {
			return nil, clErr("clGetDeviceIDs", code)
		}
		ids := make([]C.cl_device_id, nd)
		if err := clErr("clGetDeviceIDs", C.tl_clGetDeviceIDs(p, C.CL_DEVICE_TYPE_ALL, nd, &ids[0], nil)); err != nil {
			return nil, err
		}
		for di, id := range ids {
			refs = append(refs, devRef{platform: p, id: id, index: fmt.Sprintf("%d:%d", pi, di)})
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("opencl: OpenCL platforms found but no devices: %s", fixHint)
	}
	return refs, nil
}

// List describes every device of every platform.
func List() ([]Info, error) {
	refs, err := enumerate()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, len(refs))
	for i, r := range refs {
		if infos[i], err = describe(r); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

func infoString(which int, obj unsafe.Pointer, param C.cl_uint) (string, error) {
	var code C.cl_int
	s := C.tl_str(C.int(which), obj, param, &code)
	if s == nil {
		return "", clErr("clGet*Info", code)
	}
	defer C.free(unsafe.Pointer(s))
	return strings.TrimSpace(C.GoString(s)), nil
}

// devInfo reads a fixed-size device property into v.
func devInfo[T any](id C.cl_device_id, param C.cl_device_info, v *T) error {
	return clErr("clGetDeviceInfo", C.tl_clGetDeviceInfo(id, param, C.size_t(unsafe.Sizeof(*v)), unsafe.Pointer(v), nil))
}

var versionRe = regexp.MustCompile(`OpenCL (\d+)\.(\d+)`)

// clVersion parses "OpenCL X.Y ..." into 10*X+Y (0 when unparsable).
func clVersion(s string) int {
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	x, _ := strconv.Atoi(m[1])
	y, _ := strconv.Atoi(m[2])
	return 10*x + y
}

func describe(r devRef) (Info, error) {
	inf := Info{Index: r.index, Priority: "default"}
	var err error
	str := func(which int, obj unsafe.Pointer, param C.cl_uint, dst *string) {
		if err == nil {
			*dst, err = infoString(which, obj, param)
		}
	}
	dp := unsafe.Pointer(r.id)
	str(1, unsafe.Pointer(r.platform), C.CL_PLATFORM_NAME, &inf.Platform)
	str(0, dp, C.CL_DEVICE_NAME, &inf.Name)
	str(0, dp, C.CL_DEVICE_VENDOR, &inf.Vendor)
	str(0, dp, C.CL_DEVICE_VERSION, &inf.Version)
	str(0, dp, C.CL_DRIVER_VERSION, &inf.Driver)
	str(0, dp, C.CL_DEVICE_OPENCL_C_VERSION, &inf.OpenCLC)
	var exts string
	str(0, dp, C.CL_DEVICE_EXTENSIONS, &exts)
	if err != nil {
		return inf, fmt.Errorf("opencl: describe device %s: %w", r.index, err)
	}
	inf.Extensions = strings.Fields(exts)

	var typ C.cl_device_type
	var cu, align, imagePitch C.cl_uint
	var gmem, maxAlloc, lmem C.cl_ulong
	var wg, dims C.size_t
	var unified, images C.cl_bool
	for _, e := range []error{
		devInfo(r.id, C.CL_DEVICE_TYPE, &typ),
		devInfo(r.id, C.CL_DEVICE_MAX_COMPUTE_UNITS, &cu),
		devInfo(r.id, C.CL_DEVICE_MEM_BASE_ADDR_ALIGN, &align),
		devInfo(r.id, C.CL_DEVICE_GLOBAL_MEM_SIZE, &gmem),
		devInfo(r.id, C.CL_DEVICE_MAX_MEM_ALLOC_SIZE, &maxAlloc),
		devInfo(r.id, C.CL_DEVICE_LOCAL_MEM_SIZE, &lmem),
		devInfo(r.id, C.CL_DEVICE_MAX_WORK_GROUP_SIZE, &wg),
		devInfo(r.id, C.CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, &dims),
		devInfo(r.id, C.CL_DEVICE_IMAGE_SUPPORT, &images),
	} {
		if e != nil {
			return inf, fmt.Errorf("opencl: describe device %s (%s): %w", r.index, inf.Name, e)
		}
	}
	switch {
	case typ&C.CL_DEVICE_TYPE_GPU != 0:
		inf.Type = "GPU"
	case typ&C.CL_DEVICE_TYPE_CPU != 0:
		inf.Type = "CPU"
	case typ&C.CL_DEVICE_TYPE_ACCELERATOR != 0:
		inf.Type = "ACCELERATOR"
	default:
		inf.Type = "OTHER"
	}
	inf.ComputeUnits = int(cu)
	inf.BaseAddrAlign = int(align) / 8 // the query answers in bits
	inf.GlobalMem, inf.MaxAlloc, inf.LocalMem = int64(gmem), int64(maxAlloc), int64(lmem)
	inf.MaxWorkGroup = int(wg)
	if dims > 0 && dims <= 16 {
		sizes := make([]C.size_t, dims)
		if clErr("", C.tl_clGetDeviceInfo(r.id, C.CL_DEVICE_MAX_WORK_ITEM_SIZES, C.size_t(unsafe.Sizeof(sizes[0]))*dims, unsafe.Pointer(&sizes[0]), nil)) == nil {
			for _, s := range sizes {
				inf.MaxWorkItem = append(inf.MaxWorkItem, int(s))
			}
		}
	}
	// Deprecated since 2.0 but still answered; CPU devices share memory
	// whatever they say.
	_ = devInfo(r.id, C.CL_DEVICE_HOST_UNIFIED_MEMORY, &unified)
	inf.Unified = unified == C.CL_TRUE || inf.Type == "CPU"

	has := map[string]bool{}
	for _, e := range inf.Extensions {
		has[e] = true
	}
	ver := clVersion(inf.Version)
	inf.FP16 = has["cl_khr_fp16"]
	inf.Subgroups = has["cl_khr_subgroups"] || has["cl_intel_subgroups"]
	if !inf.Subgroups && ver >= 21 {
		var n C.cl_uint
		if devInfo(r.id, C.CL_DEVICE_MAX_NUM_SUB_GROUPS, &n) == nil && n > 0 {
			inf.Subgroups = true
		}
	}
	inf.ImageFromBuffer = has["cl_khr_image2d_from_buffer"]
	if !inf.ImageFromBuffer && ver >= 30 && images == C.CL_TRUE {
		if devInfo(r.id, C.CL_DEVICE_IMAGE_PITCH_ALIGNMENT, &imagePitch) == nil && imagePitch > 0 {
			inf.ImageFromBuffer = true
		}
	}
	switch {
	case has["cl_khr_priority_hints"] && ver >= 20:
		inf.PriorityExt = "khr"
	case has["cl_qcom_priority_hint"]:
		inf.PriorityExt = "qcom"
	}
	return inf, nil
}

var pdRe = regexp.MustCompile(`^\d+:\d+$`)

// choose picks the device sel names among refs, whose descriptions are infos.
func choose(sel string, refs []devRef, infos []Info) (int, error) {
	s := strings.ToLower(strings.TrimSpace(sel))
	pick := func(match func(Info) bool) int {
		for i, inf := range infos {
			if match(inf) {
				return i
			}
		}
		return -1
	}
	i := -1
	switch {
	case s == "":
		if i = pick(func(inf Info) bool { return inf.Type == "GPU" }); i < 0 {
			i = 0
		}
	case s == "gpu" || s == "cpu" || s == "accelerator":
		i = pick(func(inf Info) bool { return strings.EqualFold(inf.Type, s) })
	case pdRe.MatchString(s):
		i = pick(func(inf Info) bool { return inf.Index == s })
	default:
		i = pick(func(inf Info) bool { return strings.Contains(strings.ToLower(inf.Name), s) })
	}
	if i >= 0 {
		return i, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "opencl: no OpenCL device matches %q (select by \"gpu\", \"cpu\", \"P:D\" or part of a name); available devices:", sel)
	for _, inf := range infos {
		fmt.Fprintf(&b, "\n  %s  %s (%s, %s)", inf.Index, inf.Name, inf.Type, inf.Platform)
	}
	return -1, errors.New(b.String())
}

// Open opens the device opts selects, with one in-order queue.
func Open(opts Options) (*Device, error) {
	refs, err := enumerate()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, len(refs))
	for i, r := range refs {
		if infos[i], err = describe(r); err != nil {
			return nil, err
		}
	}
	sel := opts.Select
	if sel == "" {
		sel = os.Getenv("TLITE_DEVICE")
	}
	i, err := choose(sel, refs, infos)
	if err != nil {
		return nil, err
	}
	r, inf := refs[i], infos[i]
	d := &Device{
		info:     inf,
		platform: r.platform,
		id:       r.id,
		profile:  opts.Profile,
		buffers:  map[*Buffer]struct{}{},
		programs: map[*Program]struct{}{},
		sizes:    make([]C.size_t, 6),
		ev:       make([]C.cl_event, 1),
		bad:      make([]C.int, 1),
	}
	if d.cacheDir, err = cacheDir(opts.CacheDir); err != nil {
		return nil, err
	}

	// A priority property the driver rejects must not cost the caller the
	// device: retry without it and report "default".
	var qcom, khr C.cl_uint
	switch {
	case opts.Priority == PriorityDefault:
	case inf.PriorityExt == "qcom":
		qcom = C.TL_PRIORITY_HINT_LOW_QCOM
		if opts.Priority == PriorityHigh {
			qcom = C.TL_PRIORITY_HINT_HIGH_QCOM
		}
	case inf.PriorityExt == "khr":
		khr = C.TL_QUEUE_PRIORITY_LOW_KHR
		if opts.Priority == PriorityHigh {
			khr = C.TL_QUEUE_PRIORITY_HIGH_KHR
		}
	}
	var code C.cl_int
	d.ctx = C.tl_context(d.platform, d.id, qcom, &code)
	if code != C.CL_SUCCESS && qcom != 0 {
		qcom = 0
		d.ctx = C.tl_context(d.platform, d.id, 0, &code)
	}
	if code != C.CL_SUCCESS {
		return nil, fmt.Errorf("opencl: open %s (%s): %w", inf.Index, inf.Name, clErr("clCreateContext", code))
	}
	useProps := C.int(0)
	if clVersion(inf.Version) >= 20 && C.tl_has_queue_with_properties() != 0 {
		useProps = 1
	}
	prof := C.int(0)
	if opts.Profile {
		prof = 1
	}
	d.queue = C.tl_queue(d.ctx, d.id, useProps, prof, khr, &code)
	if code != C.CL_SUCCESS && khr != 0 {
		khr = 0
		d.queue = C.tl_queue(d.ctx, d.id, useProps, prof, 0, &code)
	}
	if code != C.CL_SUCCESS {
		C.tl_clReleaseContext(d.ctx)
		return nil, fmt.Errorf("opencl: open %s (%s): %w", inf.Index, inf.Name, clErr("create command queue", code))
	}
	if qcom != 0 || khr != 0 {
		d.info.Priority = opts.Priority.String()
	}
	return d, nil
}

// cacheDir resolves Options.CacheDir; "" means no cache.
func cacheDir(opt string) (string, error) {
	switch opt {
	case "-":
		return "", nil
	case "":
		base, err := os.UserCacheDir()
		if err != nil || base == "" {
			base = os.TempDir()
		}
		return filepath.Join(base, "tlite", "kernels"), nil
	}
	return opt, nil
}

// Info describes the device and the priority Open applied.
func (d *Device) Info() Info {
	inf := d.info
	inf.Extensions = append([]string(nil), d.info.Extensions...)
	inf.MaxWorkItem = append([]int(nil), d.info.MaxWorkItem...)
	return inf
}

// HasExtension reports whether the device lists extension name.
func (d *Device) HasExtension(name string) bool {
	for _, e := range d.info.Extensions {
		if e == name {
			return true
		}
	}
	return false
}

// Close waits for queued work, then releases every buffer, program and
// kernel still alive, the queue and the context. Closing twice is a no-op.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	err := clErr("clFinish", C.tl_clFinish(d.queue))
	d.releasePendingLocked()
	bufs := d.buffers
	progs := d.programs
	d.mu.Unlock()
	// Sub-buffers before their parents, so that every release sees a live
	// parent; Release drops each from the map.
	for b := range bufs {
		if b.parent != nil {
			b.Release()
		}
	}
	for b := range bufs {
		b.Release()
	}
	for p := range progs {
		p.Release()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	C.tl_clReleaseCommandQueue(d.queue)
	C.tl_clReleaseContext(d.ctx)
	d.closed = true
	return err
}

// String names the device for logs.
func (d *Device) String() string {
	return fmt.Sprintf("%s %s (%s)", d.info.Index, d.info.Name, d.info.Platform)
}
