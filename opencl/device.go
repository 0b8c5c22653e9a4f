// Package opencl is tlite's device runtime: one OpenCL device with one
// in-order queue, buffers and sub-buffers, programs built through a binary
// cache, kernel launches and event profiling.
//
// The OpenCL library is loaded at run time with dlopen (cl.go, through
// github.com/ebitengine/purego, so the package needs no cgo): a binary
// without any OpenCL installed still starts, and Open says how to get a
// device. It is looked for as libOpenCL.so.1 / libOpenCL.so, on Android in
// the /vendor and /system paths where phones keep their drivers, or at
// $TLITE_OPENCL_LIB. $TLITE_DEVICE selects the device when Options.Select is
// empty.
//
// The runtime binds the OpenCL calls itself rather than using
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

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	// FlushEvery makes Launch call clFlush after every FlushEvery launches,
	// so that the device starts on a long graph while the rest is still
	// being enqueued: 0 = DefaultFlushEvery, negative = never (only Flush
	// and Finish submit).
	FlushEvery int
	// CacheDir holds compiled program binaries: "" = os.UserCacheDir()/tlite/kernels
	// (os.TempDir()/tlite/kernels when there is none), "-" = no cache.
	CacheDir string
	// DeferCacheWrites leaves the binaries of programs built from source
	// to WriteCache (or Close) instead of writing each as it is built.
	// Asking a driver for a binary can cost more than the build: PoCL
	// then compiles every kernel of the program for its CPU, also those a
	// session never launches, which more than doubled a cold first run of
	// ViT-B/32. Deferred, that work happens after the first result.
	DeferCacheWrites bool
}

// Info describes a device and what Open applied to it.
type Info struct {
	Index    string // "P:D": platform and device index, usable as Options.Select
	Platform string // platform name
	Name     string
	Vendor   string
	Version  string // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 ..."
	Driver   string // CL_DRIVER_VERSION
	OpenCLC  string // CL_DEVICE_OPENCL_C_VERSION
	// CVersions are the OpenCL C versions -cl-std may ask for, as "1.2",
	// "3.0": CL_DEVICE_OPENCL_C_ALL_VERSIONS on OpenCL 3.0, else every
	// version up to OpenCL C's.
	CVersions     []string
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
	// NativeFloatWidth is CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT: floats per
	// vector register on a CPU device (8 with AVX2, 16 with AVX-512; the
	// CPU GEMMs size their register tiles by it), 0 when not answered.
	NativeFloatWidth int
	// ImageFromBuffer is cl_khr_image2d_from_buffer or, on OpenCL 3.0, a
	// non-zero CL_DEVICE_IMAGE_PITCH_ALIGNMENT on a device with images.
	ImageFromBuffer bool
	// Images is CL_DEVICE_IMAGE_SUPPORT, and ImageMaxBuffer the largest
	// one-dimensional image over a buffer in texels
	// (CL_DEVICE_IMAGE_MAX_BUFFER_SIZE, OpenCL 1.2; 0 when not answered):
	// the limits of Buffer.Image1D.
	Images         bool
	ImageMaxBuffer int64
	// PriorityExt is the priority extension the device has: "khr"
	// (cl_khr_priority_hints, queue property; this is also how Arm Mali
	// exposes priorities, Arm having no vendor priority extension), "qcom"
	// (cl_qcom_priority_hint, context property) or "".
	PriorityExt string
	// Priority is the priority Open applied: "low" or "high" when a hint
	// reached the driver, "default" otherwise (List always says "default").
	Priority string
	// PerfHint is the cl_qcom_perf_hint Open applied: "high" for a
	// low-priority context on a Qualcomm device (so that the driver does
	// not also clock it down), "" otherwise.
	PerfHint   string
	Extensions []string
}

// Device is an open OpenCL device with one in-order command queue.
type Device struct {
	mu       sync.Mutex
	info     Info
	platform handle
	id       handle
	ctx      handle
	queue    handle
	cacheDir string // "" = no cache
	// deferStores and unstored implement Options.DeferCacheWrites: the
	// programs built since the last WriteCache, with their cache paths
	// (under storeMu); writeMu serialises WriteCache, so that Close waits
	// for a write in progress.
	deferStores bool
	storeMu     sync.Mutex
	writeMu     sync.Mutex
	unstored    []unstoredProgram
	profile     bool
	closed      bool

	label string
	// rec, when set, receives every launch (StartRecording, record.go).
	rec *Recording
	// cb holds the command-buffer entry points (nil: none; cmdbuf.go);
	// baked lists the recordings holding a command buffer or private
	// kernels, for Close.
	cb    *cbFuncs
	baked map[*Recording]struct{}
	// Launch's scratch space, on the heap and reused, so that a launch
	// allocates nothing: the C calls get pointers into these.
	args  []argSlot
	sizes []uintptr // global sizes, then local sizes from index 3
	ev    []handle
	call  []uintptr // the arguments of one C call (purego build)
	bad   []int32   // the failing argument index (cgo build)
	// queueArg is []uintptr{queue}, the argument list of clFlush and
	// clFinish; only read after Open, so concurrent callers share it.
	queueArg []uintptr
	// flushEvery and unflushed implement Options.FlushEvery (under mu).
	flushEvery, unflushed int
	pending               []pendingLaunch
	done                  []Record
	base                  uint64 // device time of the first profiled start
	hasBase               bool

	stats Stats
	// live objects, released by Close
	buffers  map[*Buffer]struct{}
	programs map[*Program]struct{}
}

// fixHint is how to get a device at all, appended to errors that mean there
// is none.
const fixHint = "install an OpenCL driver (for a CPU device: apt-get install pocl-opencl-icd ocl-icd-libopencl1), or use the pure-Go CPU backend with --device go"

type devRef struct {
	platform handle
	id       handle
	index    string
}

var (
	loadMu sync.Mutex
	loaded bool
)

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
	var n uint32
	code := clCall(fns.GetPlatformIDs, 0, 0, uintptr(unsafe.Pointer(&n)))
	if code == clPlatformNotFoundKHR || (code == clSuccess && n == 0) {
		return nil, fmt.Errorf("opencl: no OpenCL platform found (the ICD loader found no driver): %s", fixHint)
	}
	if code != clSuccess {
		return nil, fmt.Errorf("%w: %s", clErr("clGetPlatformIDs", code), fixHint)
	}
	plats := make([]handle, n)
	if err := clErr("clGetPlatformIDs", clCall(fns.GetPlatformIDs, uintptr(n), uintptr(unsafe.Pointer(&plats[0])), 0)); err != nil {
		return nil, err
	}
	var refs []devRef
	for pi, p := range plats {
		var nd uint32
		code := clCall(fns.GetDeviceIDs, p, uintptr(clDeviceTypeAll), 0, 0, uintptr(unsafe.Pointer(&nd)))
		if code == clDeviceNotFound || nd == 0 {
			continue
		}
		if code != clSuccess {
			return nil, clErr("clGetDeviceIDs", code)
		}
		ids := make([]handle, nd)
		if err := clErr("clGetDeviceIDs", clCall(fns.GetDeviceIDs, p, uintptr(clDeviceTypeAll), uintptr(nd), uintptr(unsafe.Pointer(&ids[0])), 0)); err != nil {
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

// infoString reads a string property of obj through fn (clGetDeviceInfo or
// clGetPlatformInfo), whatever its length.
func infoString(fn uintptr, op string, obj handle, param uint32) (string, error) {
	var n uintptr
	if err := clErr(op, clCall(fn, obj, uintptr(param), 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	b := make([]byte, n)
	if err := clErr(op, clCall(fn, obj, uintptr(param), n, uintptr(unsafe.Pointer(&b[0])), 0)); err != nil {
		return "", err
	}
	return strings.TrimSpace(goString(b)), nil
}

// devInfo reads a fixed-size device property into v.
func devInfo[T any](id handle, param uint32, v *T) error {
	return clErr("clGetDeviceInfo", clCall(fns.GetDeviceInfo, id, uintptr(param), unsafe.Sizeof(*v), uintptr(unsafe.Pointer(v)), 0))
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
	str := func(param uint32, dst *string) {
		if err == nil {
			*dst, err = infoString(fns.GetDeviceInfo, "clGetDeviceInfo", r.id, param)
		}
	}
	inf.Platform, err = infoString(fns.GetPlatformInfo, "clGetPlatformInfo", r.platform, clPlatformName)
	str(clDeviceName, &inf.Name)
	str(clDeviceVendor, &inf.Vendor)
	str(clDeviceVersion, &inf.Version)
	str(clDriverVersion, &inf.Driver)
	str(clDeviceOpenCLC, &inf.OpenCLC)
	var exts string
	str(clDeviceExtensions, &exts)
	if err != nil {
		return inf, fmt.Errorf("opencl: describe device %s: %w", r.index, err)
	}
	inf.Extensions = strings.Fields(exts)

	var typ uint64
	var cu, align, imagePitch uint32
	var gmem, maxAlloc, lmem uint64
	var wg, dims uintptr
	var unified, images uint32
	for _, e := range []error{
		devInfo(r.id, clDeviceType, &typ),
		devInfo(r.id, clDeviceMaxComputeUnit, &cu),
		devInfo(r.id, clDeviceBaseAddrAlign, &align),
		devInfo(r.id, clDeviceGlobalMem, &gmem),
		devInfo(r.id, clDeviceMaxAlloc, &maxAlloc),
		devInfo(r.id, clDeviceLocalMem, &lmem),
		devInfo(r.id, clDeviceMaxWGSize, &wg),
		devInfo(r.id, clDeviceMaxWIDims, &dims),
		devInfo(r.id, clDeviceImageSupport, &images),
	} {
		if e != nil {
			return inf, fmt.Errorf("opencl: describe device %s (%s): %w", r.index, inf.Name, e)
		}
	}
	switch {
	case typ&clDeviceTypeGPU != 0:
		inf.Type = "GPU"
	case typ&clDeviceTypeCPU != 0:
		inf.Type = "CPU"
	case typ&clDeviceTypeAccel != 0:
		inf.Type = "ACCELERATOR"
	default:
		inf.Type = "OTHER"
	}
	inf.ComputeUnits = int(cu)
	inf.BaseAddrAlign = int(align) / 8 // the query answers in bits
	inf.GlobalMem, inf.MaxAlloc, inf.LocalMem = int64(gmem), int64(maxAlloc), int64(lmem)
	inf.MaxWorkGroup = int(wg)
	if dims > 0 && dims <= 16 {
		sizes := make([]uintptr, dims)
		if clCall(fns.GetDeviceInfo, r.id, clDeviceMaxWISizes, unsafe.Sizeof(sizes[0])*dims, uintptr(unsafe.Pointer(&sizes[0])), 0) == clSuccess {
			for _, s := range sizes {
				inf.MaxWorkItem = append(inf.MaxWorkItem, int(s))
			}
		}
	}
	// Deprecated since 2.0 but still answered; CPU devices share memory
	// whatever they say.
	_ = devInfo(r.id, clDeviceHostUnified, &unified)
	inf.Unified = unified == clTrue || inf.Type == "CPU"
	var nfw uint32
	if devInfo(r.id, clDeviceNativeFloat, &nfw) == nil {
		inf.NativeFloatWidth = int(nfw)
	}

	has := map[string]bool{}
	for _, e := range inf.Extensions {
		has[e] = true
	}
	ver := clVersion(inf.Version)
	inf.CVersions = cVersions(r.id, ver, inf.OpenCLC)
	inf.FP16 = has["cl_khr_fp16"]
	inf.Subgroups = has["cl_khr_subgroups"] || has["cl_intel_subgroups"]
	if !inf.Subgroups && ver >= 21 {
		var n uint32
		if devInfo(r.id, clDeviceMaxSubGroups, &n) == nil && n > 0 {
			inf.Subgroups = true
		}
	}
	inf.ImageFromBuffer = has["cl_khr_image2d_from_buffer"]
	inf.Images = images == clTrue
	if inf.Images && ver >= 12 {
		var n uintptr
		if devInfo(r.id, clDeviceImageMaxBuffer, &n) == nil {
			inf.ImageMaxBuffer = int64(n)
		}
	}
	if !inf.ImageFromBuffer && ver >= 30 && images == clTrue {
		if devInfo(r.id, clDeviceImagePitch, &imagePitch) == nil && imagePitch > 0 {
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

// cVersions lists the OpenCL C versions of a device whose platform version
// is ver (10*major+minor) and whose CL_DEVICE_OPENCL_C_VERSION is openclC.
func cVersions(id handle, ver int, openclC string) []string {
	if ver >= 30 {
		// cl_name_version: a cl_version (major<<22 | minor<<12 | patch) and a
		// 64-byte name.
		const entry = 4 + 64
		var n uintptr
		if clCall(fns.GetDeviceInfo, id, clDeviceCAllVersions, 0, 0, uintptr(unsafe.Pointer(&n))) == clSuccess && n >= entry && n <= 64*entry {
			b := make([]byte, n)
			if clCall(fns.GetDeviceInfo, id, clDeviceCAllVersions, n, uintptr(unsafe.Pointer(&b[0])), 0) == clSuccess {
				var out []string
				for i := 0; i+entry <= len(b); i += entry {
					v := *(*uint32)(unsafe.Pointer(&b[i]))
					s := fmt.Sprintf("%d.%d", v>>22, (v>>12)&0x3ff)
					if !slices.Contains(out, s) {
						out = append(out, s)
					}
				}
				return out
			}
		}
	}
	var out []string
	if c := clVersion(strings.Replace(openclC, "OpenCL C", "OpenCL", 1)); c > 0 {
		for _, v := range []int{10, 11, 12, 20, 21, 22, 30} {
			if v <= c {
				out = append(out, fmt.Sprintf("%d.%d", v/10, v%10))
			}
		}
	}
	return out
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
		sizes:    make([]uintptr, 6),
		ev:       make([]handle, 1),
		call:     make([]uintptr, 9),
		bad:      make([]int32, 1),
	}
	d.deferStores = opts.DeferCacheWrites
	if d.cacheDir, err = cacheDir(opts.CacheDir); err != nil {
		return nil, err
	}

	// A priority property the driver rejects must not cost the caller the
	// device: retry without it and report "default".
	var qcom, khr uint64
	switch {
	case opts.Priority == PriorityDefault:
	case inf.PriorityExt == "qcom":
		qcom = clPrioLowQCOM
		if opts.Priority == PriorityHigh {
			qcom = clPrioHighQCOM
		}
	case inf.PriorityExt == "khr":
		khr = clQueuePrioLowK
		if opts.Priority == PriorityHigh {
			khr = clQueuePrioHighK
		}
	}
	perf := perfHintFor(opts.Priority, inf.Extensions)
	var code int32
	d.ctx, code = createContext(d.platform, d.id, qcom, perf)
	if code != clSuccess && perf != 0 {
		perf = 0
		d.ctx, code = createContext(d.platform, d.id, qcom, 0)
	}
	if code != clSuccess && qcom != 0 {
		qcom = 0
		d.ctx, code = createContext(d.platform, d.id, 0, 0)
	}
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: open %s (%s): %w", inf.Index, inf.Name, clErr("clCreateContext", code))
	}
	useProps := clVersion(inf.Version) >= 20 && fns.CreateCommandQueueWithProperties != 0
	d.queue, code = createQueue(d.ctx, d.id, useProps, opts.Profile, khr)
	if code != clSuccess && khr != 0 {
		khr = 0
		d.queue, code = createQueue(d.ctx, d.id, useProps, opts.Profile, 0)
	}
	if code != clSuccess {
		clCall(fns.ReleaseContext, d.ctx)
		return nil, fmt.Errorf("opencl: open %s (%s): %w", inf.Index, inf.Name, clErr("create command queue", code))
	}
	d.queueArg = []uintptr{d.queue}
	if qcom != 0 || khr != 0 {
		d.info.Priority = opts.Priority.String()
	}
	if perf != 0 {
		d.info.PerfHint = "high"
	}
	d.flushEvery = opts.FlushEvery
	if d.flushEvery == 0 {
		d.flushEvery = DefaultFlushEvery
	}
	d.loadCommandBuffers()
	return d, nil
}

// DefaultFlushEvery is Options.FlushEvery's default: a decoder step of a
// small model enqueues a few hundred kernels, so the device gets its first
// batch after 64 rather than after all of them.
const DefaultFlushEvery = 64

// perfHintFor is the cl_qcom_perf_hint value Open asks for: HIGH for a
// low-priority context on a device that has the extension (Qualcomm's
// drivers may otherwise run a low-priority context at low clocks, which
// would make a background model slow rather than merely polite), 0 (none)
// otherwise.
func perfHintFor(p Priority, exts []string) uint64 {
	if p != PriorityLow || !slices.Contains(exts, "cl_qcom_perf_hint") {
		return 0
	}
	return clPerfHintHighQCOM
}

// contextProps is the zero-terminated property list of a one-device
// context on platform p: prioHint != 0 adds CL_CONTEXT_PRIORITY_HINT_QCOM,
// perfHint != 0 CL_CONTEXT_PERF_HINT_QCOM, with those values.
func contextProps(p handle, prioHint, perfHint uint64) []uintptr {
	props := []uintptr{clContextPlatform, p}
	if prioHint != 0 {
		props = append(props, clCtxPrioHintQCOM, uintptr(prioHint))
	}
	if perfHint != 0 {
		props = append(props, clCtxPerfHintQCOM, uintptr(perfHint))
	}
	return append(props, 0)
}

// createContext creates a one-device context with contextProps' hints.
func createContext(p, d handle, qcomHint, perfHint uint64) (handle, int32) {
	props := contextProps(p, qcomHint, perfHint)
	devs := []handle{d}
	var code int32
	ctx := clCreate(fns.CreateContext, uintptr(unsafe.Pointer(&props[0])), 1, uintptr(unsafe.Pointer(&devs[0])), 0, 0, uintptr(unsafe.Pointer(&code)))
	return ctx, code
}

// createQueue creates an in-order queue, through
// clCreateCommandQueueWithProperties when useProps (OpenCL >= 2.0);
// khrPrio != 0 adds CL_QUEUE_PRIORITY_KHR.
func createQueue(ctx, d handle, useProps, profile bool, khrPrio uint64) (handle, int32) {
	var code int32
	if !useProps {
		var props uint64
		if profile {
			props = clQueueProfiling
		}
		q := clCreate(fns.CreateCommandQueue, ctx, d, uintptr(props), uintptr(unsafe.Pointer(&code)))
		return q, code
	}
	props := make([]uint64, 0, 5) // cl_queue_properties, zero-terminated
	if profile {
		props = append(props, clQueueProperties, clQueueProfiling)
	}
	if khrPrio != 0 {
		props = append(props, clQueuePriorityK, khrPrio)
	}
	props = append(props, 0)
	q := clCreate(fns.CreateCommandQueueWithProperties, ctx, d, uintptr(unsafe.Pointer(&props[0])), uintptr(unsafe.Pointer(&code)))
	return q, code
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
	d.WriteCache()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	err := clErr("clFinish", clCall(fns.Finish, d.queue))
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
	// Command buffers before the queue they were made for.
	for r := range d.baked {
		d.dropBakedLocked(r)
	}
	clCall(fns.ReleaseCommandQueue, d.queue)
	clCall(fns.ReleaseContext, d.ctx)
	d.closed = true
	return err
}

// String names the device for logs.
func (d *Device) String() string {
	return fmt.Sprintf("%s %s (%s)", d.info.Index, d.info.Name, d.info.Platform)
}
