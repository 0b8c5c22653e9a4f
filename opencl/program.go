package opencl

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// Program is a program built for the device.
type Program struct {
	d         *Device
	prog      handle
	fromCache bool
	kernels   []*Kernel
	released  bool
}

// FromCache reports whether the program was loaded from the binary cache
// rather than compiled from source.
func (p *Program) FromCache() bool { return p.fromCache }

// BuildError is a failed program build with the compiler's log.
type BuildError struct {
	Device  string // device name
	Options string
	Code    int    // status of clBuildProgram
	Log     string // the build log, verbatim
	// Lines are the source lines the log's "file:line:col: error" reports
	// point at, as "line N: text", so the error shows the offending code
	// even when the log does not quote it.
	Lines []string
}

func (e *BuildError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "opencl: build failed on %s", e.Device)
	if e.Options != "" {
		fmt.Fprintf(&b, " with options %q", e.Options)
	}
	fmt.Fprintf(&b, ": %s (%d)", codeName(e.Code), e.Code)
	for _, l := range e.Lines {
		b.WriteString("\n  ")
		b.WriteString(l)
	}
	log := e.Log
	const maxLog = 8 << 10
	if len(log) > maxLog {
		log = log[:maxLog] + "\n... (log truncated; BuildError.Log has all of it)"
	}
	if log != "" {
		b.WriteString("\nbuild log:\n")
		b.WriteString(log)
	}
	return b.String()
}

// errLineRe finds the ":LINE:COL:" position in an error report of a
// Clang-based compiler (most OpenCL drivers): "<src>:3:10: error: ..." or,
// as PoCL prints it, "error: <file>:3:10: ...".
var errLineRe = regexp.MustCompile(`:(\d+):\d+:`)

func offendingLines(log, src string) []string {
	lines := strings.Split(src, "\n")
	seen := map[int]bool{}
	var nums []int
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(strings.ToLower(l), "error") {
			continue
		}
		m := errLineRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 || n > len(lines) || seen[n] {
			continue
		}
		seen[n] = true
		nums = append(nums, n)
	}
	sort.Ints(nums)
	if len(nums) > 8 {
		nums = nums[:8]
	}
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = fmt.Sprintf("line %d: %s", n, strings.TrimSpace(lines[n-1]))
	}
	return out
}

// cacheMagic starts every cache file; the digest after it covers the
// binary, so a truncated or corrupt file is rejected before a driver sees
// it (drivers are not robust against garbage binaries).
const cacheMagic = "TLCLBIN1"

// cacheKey names the cache entry of src built with options for this device:
// anything that can change the compiled code is part of it.
func (d *Device) cacheKey(src, options string) string {
	h := sha256.New()
	for _, s := range []string{cacheMagic, d.info.Platform, d.info.Name, d.info.Driver, d.info.Version, options, src} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Build compiles src with options (e.g. "-DN=4"; math is precise unless
// the options relax it). With a cache directory, a binary built before for
// the same device, driver, options and source is loaded instead; a cache
// entry that fails its checksum or that the driver rejects is ignored and
// rewritten.
func (d *Device) Build(src, options string) (*Program, error) {
	if d.isClosed() {
		return nil, fmt.Errorf("opencl: Build on a closed device")
	}
	var path string
	if d.cacheDir != "" {
		path = filepath.Join(d.cacheDir, d.cacheKey(src, options)+".bin")
		if p := d.loadCached(path, options); p != nil {
			return p, nil
		}
	}
	p, err := d.buildSource(src, options)
	if err != nil {
		return nil, err
	}
	if path != "" {
		if d.deferStores {
			// The entry holds its own reference, so that releasing the
			// Program meanwhile cannot free what WriteCache reads.
			clCall(fns.RetainProgram, p.prog)
			d.storeMu.Lock()
			d.unstored = append(d.unstored, unstoredProgram{p.prog, path})
			d.storeMu.Unlock()
		} else {
			d.storeCached(p.prog, path)
		}
	}
	return p, nil
}

// unstoredProgram is a program whose binary WriteCache has yet to store.
type unstoredProgram struct {
	prog handle // retained until stored
	path string
}

// WriteCache stores the binaries of the programs built since the last call
// whose writing Options.DeferCacheWrites put off (a no-op otherwise).
// Close calls it first; a caller may call it earlier, from any goroutine,
// once the work it wanted fast is done.
func (d *Device) WriteCache() {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	for {
		// The list's lock is not held while a binary is fetched, which
		// can take seconds: a Build meanwhile only appends.
		d.storeMu.Lock()
		if len(d.unstored) == 0 {
			d.storeMu.Unlock()
			return
		}
		u := d.unstored[0]
		d.unstored = d.unstored[1:]
		d.storeMu.Unlock()
		d.storeCached(u.prog, u.path)
		clCall(fns.ReleaseProgram, u.prog)
	}
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (d *Device) track(prog handle, cached bool) *Program {
	p := &Program{d: d, prog: prog, fromCache: cached}
	d.mu.Lock()
	d.programs[p] = struct{}{}
	if cached {
		d.stats.CacheHits++
	} else {
		d.stats.Builds++
	}
	d.mu.Unlock()
	return p
}

func (d *Device) buildSource(src, options string) (*Program, error) {
	if src == "" {
		return nil, fmt.Errorf("opencl: Build: empty source")
	}
	text := []byte(src)
	strs := []*byte{&text[0]}
	lens := []uintptr{uintptr(len(text))}
	var code int32
	prog := clCreate(fns.CreateProgramWithSource, d.ctx, 1, uintptr(unsafe.Pointer(&strs[0])), uintptr(unsafe.Pointer(&lens[0])), uintptr(unsafe.Pointer(&code)))
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: Build: %w", clErr("clCreateProgramWithSource", code))
	}
	if code = d.build(prog, options); code != clSuccess {
		e := &BuildError{Device: d.info.Name, Options: options, Code: int(code)}
		e.Log = strings.TrimSpace(d.buildLog(prog))
		e.Lines = offendingLines(e.Log, src)
		clCall(fns.ReleaseProgram, prog)
		return nil, e
	}
	return d.track(prog, false), nil
}

// build runs clBuildProgram for the device.
func (d *Device) build(prog handle, options string) int32 {
	devs := []handle{d.id}
	return clCall(fns.BuildProgram, prog, 1, uintptr(unsafe.Pointer(&devs[0])), uintptr(unsafe.Pointer(cstr(options))), 0, 0)
}

// buildLog is prog's build log on the device ("" when there is none).
func (d *Device) buildLog(prog handle) string {
	var n uintptr
	if clCall(fns.GetProgramBuildInfo, prog, d.id, clProgramBuildLog, 0, 0, uintptr(unsafe.Pointer(&n))) != clSuccess || n == 0 {
		return ""
	}
	b := make([]byte, n)
	if clCall(fns.GetProgramBuildInfo, prog, d.id, clProgramBuildLog, n, uintptr(unsafe.Pointer(&b[0])), 0) != clSuccess {
		return ""
	}
	return goString(b)
}

// programBinary returns the device binary of a one-device program.
func programBinary(prog handle) ([]byte, int32) {
	var n uintptr
	if code := clCall(fns.GetProgramInfo, prog, clProgramBinarySizes, unsafe.Sizeof(n), uintptr(unsafe.Pointer(&n)), 0); code != clSuccess {
		return nil, code
	}
	if n == 0 {
		return nil, clInvalidProgramExec
	}
	bin := make([]byte, n)
	ptrs := []*byte{&bin[0]}
	if code := clCall(fns.GetProgramInfo, prog, clProgramBinaries, unsafe.Sizeof(ptrs[0]), uintptr(unsafe.Pointer(&ptrs[0])), 0); code != clSuccess {
		return nil, code
	}
	return bin, clSuccess
}

// loadCached returns the program cached at path, or nil (removing the file
// when it is unusable, so the caller's rebuild replaces it).
func (d *Device) loadCached(path, options string) *Program {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	reject := func() *Program {
		os.Remove(path)
		d.mu.Lock()
		d.stats.CacheRejects++
		d.mu.Unlock()
		return nil
	}
	hdr := len(cacheMagic) + sha256.Size
	if len(data) <= hdr || string(data[:len(cacheMagic)]) != cacheMagic {
		return reject()
	}
	bin := data[hdr:]
	if sum := sha256.Sum256(bin); !bytes.Equal(sum[:], data[len(cacheMagic):hdr]) {
		return reject()
	}
	devs := []handle{d.id}
	lens := []uintptr{uintptr(len(bin))}
	bins := []*byte{&bin[0]}
	var code, status int32
	prog := clCreate(fns.CreateProgramWithBinary, d.ctx, 1, uintptr(unsafe.Pointer(&devs[0])), uintptr(unsafe.Pointer(&lens[0])),
		uintptr(unsafe.Pointer(&bins[0])), uintptr(unsafe.Pointer(&status)), uintptr(unsafe.Pointer(&code)))
	if code == clSuccess && status != clSuccess {
		clCall(fns.ReleaseProgram, prog)
		code = status
	}
	if code != clSuccess {
		return reject()
	}
	if d.build(prog, options) != clSuccess {
		clCall(fns.ReleaseProgram, prog)
		return reject()
	}
	return d.track(prog, true)
}

// storeCached writes prog's binary to path. The cache is an optimisation:
// failures leave it without the entry and are otherwise ignored.
func (d *Device) storeCached(prog handle, path string) {
	data, code := programBinary(prog)
	if code != clSuccess {
		return
	}
	sum := sha256.Sum256(data)
	out := make([]byte, 0, len(cacheMagic)+len(sum)+len(data))
	out = append(append(append(out, cacheMagic...), sum[:]...), data...)
	if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
		return
	}
	// Write-then-rename so that concurrent processes never read half a file.
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(out)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), path) != nil {
		os.Remove(f.Name())
		return
	}
	d.mu.Lock()
	d.stats.CacheWrites++
	d.mu.Unlock()
}

// Release frees the program and its kernels. It is idempotent.
func (p *Program) Release() {
	if p == nil {
		return
	}
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.released || d.closed {
		return
	}
	p.released = true
	for _, k := range p.kernels {
		if !k.released {
			k.released = true
			clCall(fns.ReleaseKernel, k.k)
		}
	}
	clCall(fns.ReleaseProgram, p.prog)
	delete(d.programs, p)
}

// Kernel is one kernel of a program. Its arguments are set by each Launch.
type Kernel struct {
	p        *Program
	k        handle
	name     string
	nargs    int
	released bool
	// wgSize is CL_KERNEL_WORK_GROUP_SIZE, reqd the compiled
	// reqd_work_group_size (zeros when none), priv
	// CL_KERNEL_PRIVATE_MEM_SIZE: asked once, after the build, so that a
	// launch whose local size the kernel cannot take fails with the sizes
	// named rather than CL_INVALID_WORK_GROUP_SIZE.
	wgSize int
	reqd   [3]int
	priv   int64
}

// WorkGroupSize is CL_KERNEL_WORK_GROUP_SIZE: the most work-items a
// work-group of this kernel may have on its device (0 if the driver did
// not say).
func (k *Kernel) WorkGroupSize() int { return k.wgSize }

// RequiredWorkGroupSize is the kernel's reqd_work_group_size attribute
// (CL_KERNEL_COMPILE_WORK_GROUP_SIZE); all zeros when it has none.
func (k *Kernel) RequiredWorkGroupSize() [3]int { return k.reqd }

// PrivateMemSize is CL_KERNEL_PRIVATE_MEM_SIZE: the private memory, in
// bytes, one work-item uses (register spills show here on GPUs).
func (k *Kernel) PrivateMemSize() int64 { return k.priv }

// checkLocal reports a local size the kernel cannot be launched with.
func (k *Kernel) checkLocal(local []int) error {
	if local == nil {
		return nil
	}
	n := 1
	for _, l := range local {
		n *= l
	}
	if k.reqd != [3]int{} {
		for i := 0; i < 3; i++ {
			want, got := k.reqd[i], 1
			if i < len(local) {
				got = local[i]
			}
			if want != got {
				return fmt.Errorf("opencl: launch %s: local size %s, but the kernel was compiled with reqd_work_group_size(%d, %d, %d)",
					k.name, dims(local), k.reqd[0], k.reqd[1], k.reqd[2])
			}
		}
	}
	if k.wgSize > 0 && n > k.wgSize {
		return fmt.Errorf("opencl: launch %s: local size %s is %d work-items; CL_KERNEL_WORK_GROUP_SIZE is %d on this device (%d bytes of private memory per work-item)",
			k.name, dims(local), n, k.wgSize, k.priv)
	}
	return nil
}

// Name is the kernel's function name.
func (k *Kernel) Name() string { return k.name }

// NumArgs is the number of arguments the kernel takes.
func (k *Kernel) NumArgs() int { return k.nargs }

// Kernel returns the kernel function name of p.
func (p *Program) Kernel(name string) (*Kernel, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.released || d.closed {
		return nil, fmt.Errorf("opencl: kernel %s: program released", name)
	}
	var code int32
	k := clCreate(fns.CreateKernel, p.prog, uintptr(unsafe.Pointer(cstr(name))), uintptr(unsafe.Pointer(&code)))
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: kernel %s: %w", name, clErr("clCreateKernel", code))
	}
	var nargs uint32
	if code := clCall(fns.GetKernelInfo, k, clKernelNumArgs, unsafe.Sizeof(nargs), uintptr(unsafe.Pointer(&nargs)), 0); code != clSuccess {
		clCall(fns.ReleaseKernel, k)
		return nil, fmt.Errorf("opencl: kernel %s: %w", name, clErr("clGetKernelInfo(CL_KERNEL_NUM_ARGS)", code))
	}
	kern := &Kernel{p: p, k: k, name: name, nargs: int(nargs)}
	kern.queryWorkGroup(d.id)
	p.kernels = append(p.kernels, kern)
	return kern, nil
}

// Binary returns the program's device binary (clGetProgramInfo
// CL_PROGRAM_BINARIES), the bytes the cache stores.
func (p *Program) Binary() ([]byte, error) {
	bin, code := programBinary(p.prog)
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: program binary: %w", clErr("clGetProgramInfo(CL_PROGRAM_BINARIES)", code))
	}
	return bin, nil
}

// queryWorkGroup fills the kernel's work-group limits; a query the driver
// fails leaves its field zero (unchecked) rather than failing the kernel.
func (k *Kernel) queryWorkGroup(dev handle) {
	var wg uintptr
	if clCall(fns.GetKernelWorkGroupInfo, k.k, dev, clKernelWorkGroupSize, unsafe.Sizeof(wg), uintptr(unsafe.Pointer(&wg)), 0) == clSuccess {
		k.wgSize = int(wg)
	}
	var reqd [3]uintptr
	if clCall(fns.GetKernelWorkGroupInfo, k.k, dev, clKernelCompileWGSize, unsafe.Sizeof(reqd), uintptr(unsafe.Pointer(&reqd[0])), 0) == clSuccess {
		for i, r := range reqd {
			k.reqd[i] = int(r)
		}
	}
	var priv uint64
	if clCall(fns.GetKernelWorkGroupInfo, k.k, dev, clKernelPrivateMemSize, unsafe.Sizeof(priv), uintptr(unsafe.Pointer(&priv)), 0) == clSuccess {
		k.priv = int64(priv)
	}
}
