package opencl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// open returns a device with a private cache directory, closed at the end
// of the test.
func open(t testing.TB, opts Options) *Device {
	t.Helper()
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

func f32bytes(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	xs := make([]float32, len(b)/4)
	for i := range xs {
		xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return xs
}

func TestListAndOpen(t *testing.T) {
	infos, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) == 0 {
		t.Fatal("List returned no devices and no error")
	}
	for _, inf := range infos {
		t.Logf("%s %q type=%s cu=%d maxAlloc=%d align=%d fp16=%v subgroups=%v img=%v prio=%q ver=%q C=%q",
			inf.Index, inf.Name, inf.Type, inf.ComputeUnits, inf.MaxAlloc, inf.BaseAddrAlign,
			inf.FP16, inf.Subgroups, inf.ImageFromBuffer, inf.PriorityExt, inf.Version, inf.OpenCLC)
		if !slices.Contains(inf.CVersions, "1.2") && clVersion(inf.Version) >= 12 {
			t.Errorf("%s: OpenCL C versions %v lack 1.2 on an OpenCL %s device", inf.Index, inf.CVersions, inf.Version)
		}
		if inf.Name == "" || inf.MaxAlloc <= 0 || inf.GlobalMem < inf.MaxAlloc || inf.BaseAddrAlign <= 0 || inf.MaxWorkGroup <= 0 || len(inf.Extensions) == 0 {
			t.Errorf("implausible info %+v", inf)
		}
	}
	// Every listed device opens by its index, and reports the same identity.
	for _, inf := range infos {
		d := open(t, Options{Select: inf.Index})
		if got := d.Info(); got.Index != inf.Index || got.Name != inf.Name {
			t.Errorf("Select %q opened %s %q", inf.Index, got.Index, got.Name)
		}
	}
	// Selection by type and by a case-swapped name fragment.
	first := infos[0]
	d := open(t, Options{Select: strings.ToUpper(first.Name[:len(first.Name)/2+1])})
	if d.Info().Name != first.Name {
		t.Errorf("select by name fragment opened %q, want %q", d.Info().Name, first.Name)
	}
	d = open(t, Options{Select: strings.ToLower(first.Type)})
	if d.Info().Type != first.Type {
		t.Errorf("select %q opened a %s", first.Type, d.Info().Type)
	}
}

func TestSelectMissingListsDevices(t *testing.T) {
	infos, err := List()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{Select: "nonexistent-device-xyz", CacheDir: "-"})
	if err == nil {
		t.Fatal("Open of a nonexistent device succeeded")
	}
	for _, inf := range infos {
		if !strings.Contains(err.Error(), inf.Name) || !strings.Contains(err.Error(), inf.Index) {
			t.Errorf("error does not list device %s %q: %v", inf.Index, inf.Name, err)
		}
	}
	if !strings.Contains(err.Error(), "nonexistent-device-xyz") {
		t.Errorf("error does not name the selection: %v", err)
	}
}

func TestSelectFromEnv(t *testing.T) {
	infos, err := List()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TLITE_DEVICE", "nonexistent-device-xyz")
	if _, err := Open(Options{CacheDir: "-"}); err == nil {
		t.Fatal("TLITE_DEVICE was ignored")
	}
	last := infos[len(infos)-1]
	t.Setenv("TLITE_DEVICE", last.Index)
	d := open(t, Options{})
	if d.Info().Index != last.Index {
		t.Errorf("TLITE_DEVICE=%s opened %s", last.Index, d.Info().Index)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	d := open(t, Options{})
	b, err := d.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	if err := d.Write(b, 0, src); err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 100, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	copy(src[100:], []byte{1, 2, 3})
	got := make([]byte, 1000)
	if err := d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("read back differs from what was written")
	}
	part := make([]byte, 10)
	if err := d.Read(b, 995, part); err == nil {
		t.Error("read past the end succeeded")
	}
	if err := d.Write(b, -1, part); err == nil {
		t.Error("write at a negative offset succeeded")
	}
	if _, err := d.Alloc(int(d.Info().MaxAlloc) + 1); err == nil || !strings.Contains(err.Error(), "CL_DEVICE_MAX_MEM_ALLOC_SIZE") {
		t.Errorf("oversized Alloc: %v", err)
	}
	b.Release()
	b.Release() // idempotent
	if err := d.Read(b, 0, part); err == nil {
		t.Error("read of a released buffer succeeded")
	}
}

func TestAllocHost(t *testing.T) {
	d := open(t, Options{})
	// Memory outside the Go heap, as a mapped weights file would be.
	hostMem, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("anonymous mmap: %v", err)
	}
	defer syscall.Munmap(hostMem)
	for i := range hostMem {
		hostMem[i] = byte(255 - i)
	}
	b, err := d.AllocHost(unsafe.Pointer(&hostMem[0]), len(hostMem))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	got := make([]byte, len(hostMem))
	if err := d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, hostMem) {
		t.Error("AllocHost buffer does not hold the host bytes")
	}
}

// TestAllocFilled fills buffers through a mapping, host-visible and plain,
// and reads them back; a failing fill releases its buffer and reports the
// fill's error.
func TestAllocFilled(t *testing.T) {
	d := open(t, Options{})
	for _, hostAlloc := range []bool{true, false} {
		const n = 3*4096 + 20
		b, err := d.AllocFilled(n, hostAlloc, func(dst []byte) error {
			if len(dst) != n {
				return errors.New("wrong mapping size")
			}
			for i := range dst {
				dst[i] = byte(i * 7)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("hostAlloc %v: %v", hostAlloc, err)
		}
		got := make([]byte, n)
		if err := d.Read(b, 0, got); err != nil {
			t.Fatal(err)
		}
		for i, x := range got {
			if x != byte(i*7) {
				t.Fatalf("hostAlloc %v: byte %d is %d, want %d", hostAlloc, i, x, byte(i*7))
			}
		}
		b.Release()
	}
	live := d.Stats().LiveBuffers
	boom := errors.New("boom")
	if _, err := d.AllocFilled(64, true, func([]byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failing fill gave %v, want its error", err)
	}
	if got := d.Stats().LiveBuffers; got != live {
		t.Errorf("a failed AllocFilled left %d live buffers, want %d", got, live)
	}
	if _, err := d.AllocFilled(0, true, func([]byte) error { return nil }); err == nil {
		t.Error("AllocFilled(0) succeeded")
	}
}

func TestSubBuffer(t *testing.T) {
	d := open(t, Options{})
	align := d.Info().BaseAddrAlign
	b, err := d.Alloc(4 * align)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 4*align)
	for i := range src {
		src[i] = byte(i % 251)
	}
	if err := d.Write(b, 0, src); err != nil {
		t.Fatal(err)
	}
	s, err := b.Sub(align, 2*align)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*align)
	if err := d.Read(s, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src[align:3*align]) {
		t.Error("sub-buffer does not view its parent's bytes")
	}
	// A sub-buffer of the sub-buffer is placed in the root allocation.
	ss, err := s.Sub(align, align)
	if err != nil {
		t.Fatal(err)
	}
	if ss.Offset() != 2*align {
		t.Errorf("nested sub-buffer offset %d, want %d", ss.Offset(), 2*align)
	}
	got = got[:align]
	if err := d.Read(ss, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src[2*align:3*align]) {
		t.Error("nested sub-buffer does not view the right bytes")
	}
	if _, err := b.Sub(align/2+1, 16); err == nil || !strings.Contains(err.Error(), "alignment") {
		t.Errorf("misaligned Sub: %v", err)
	}
	if _, err := b.Sub(3*align, 2*align); err == nil {
		t.Error("Sub past the end succeeded")
	}
	// Releasing the parent first must leave the sub-buffer usable.
	b.Release()
	if err := d.Read(s, 0, got); err != nil {
		t.Fatalf("sub-buffer after parent release: %v", err)
	}
	if !bytes.Equal(got, src[align:2*align]) {
		t.Error("sub-buffer lost its bytes when the parent was released")
	}
	s.Release()
	ss.Release()
}

func TestCopyFillStats(t *testing.T) {
	d := open(t, Options{})
	before := d.Stats()
	a, err := d.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(a, 0, 256, []byte{0xAB, 0xCD, 0xEF, 0x01}); err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(b, 0, 256, []byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := d.Copy(b, 64, a, 8, 100); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 256)
	if err := d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		want := byte(0)
		if i >= 64 && i < 164 {
			want = []byte{0xAB, 0xCD, 0xEF, 0x01}[(i-64+8)%4]
		}
		if x != want {
			t.Fatalf("byte %d = %#x, want %#x", i, x, want)
		}
	}
	if err := d.Copy(a, 10, a, 20, 50); err == nil {
		t.Error("overlapping Copy succeeded")
	}
	if err := d.Fill(a, 2, 8, []byte{1, 2, 3, 4}); err == nil {
		t.Error("Fill at an offset not a multiple of the pattern succeeded")
	}
	if err := d.Fill(a, 0, 6, []byte{1, 2, 3}); err == nil {
		t.Error("Fill with a 3-byte pattern succeeded")
	}
	if err := d.Write(a, 0, make([]byte, 30)); err != nil {
		t.Fatal(err)
	}
	s := d.Stats()
	if s.BytesCopied-before.BytesCopied != 100 || s.BytesRead-before.BytesRead != 256 || s.BytesWritten-before.BytesWritten != 30 {
		t.Errorf("byte counters moved by copied %d read %d written %d, want 100 256 30",
			s.BytesCopied-before.BytesCopied, s.BytesRead-before.BytesRead, s.BytesWritten-before.BytesWritten)
	}
	if s.Allocs-before.Allocs != 2 || s.AllocBytes-before.AllocBytes != 512 || s.LiveBuffers != 2 || s.LiveBytes != 512 {
		t.Errorf("alloc counters %+v", s)
	}
	a.Release()
	if s := d.Stats(); s.LiveBuffers != 1 || s.LiveBytes != 256 {
		t.Errorf("after a release: %d live buffers, %d bytes; want 1, 256", s.LiveBuffers, s.LiveBytes)
	}
}

const vecSrc = `
__kernel void axpb(__global const float *x, __global float *y, float a, int n, __local float *tmp) {
	int i = get_global_id(0);
	int l = get_local_id(0);
	if (i < n) tmp[l] = a * x[i] + (float)n;
	barrier(CLK_LOCAL_MEM_FENCE);
	if (i < n) y[i] = tmp[l];
}
__kernel void addk(__global float *y, long k, uint u) { y[get_global_id(0)] += (float)k + (float)u; }
`

func TestLaunch(t *testing.T) {
	d := open(t, Options{})
	p, err := d.Build(vecSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	k, err := p.Kernel("axpb")
	if err != nil {
		t.Fatal(err)
	}
	if k.Name() != "axpb" || k.NumArgs() != 5 {
		t.Errorf("kernel %q with %d args", k.Name(), k.NumArgs())
	}
	const n = 100
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i) - 40.5
	}
	x, _ := d.Alloc(4 * n)
	y, _ := d.Alloc(4 * 128)
	if err := d.Write(x, 0, f32bytes(xs)); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(k, []int{128}, []int{32}, x, y, float32(1.5), int32(n), Local(32*4)); err != nil {
		t.Fatal(err)
	}
	k2, err := p.Kernel("addk")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(k2, []int{n}, nil, y, int64(3), uint32(4)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*n)
	if err := d.Read(y, 0, raw); err != nil {
		t.Fatal(err)
	}
	for i, got := range bytesF32(raw) {
		if want := 1.5*xs[i] + n + 7; got != want {
			t.Fatalf("y[%d] = %v, want %v", i, got, want)
		}
	}
	if d.Stats().Launches != 2 {
		t.Errorf("Launches = %d, want 2", d.Stats().Launches)
	}

	// Argument errors name the kernel and the argument.
	err = d.Launch(k, []int{128}, []int{32}, x, y, 1.5, int32(n), Local(128))
	if err == nil || !strings.Contains(err.Error(), "axpb") || !strings.Contains(err.Error(), "argument 2") || !strings.Contains(err.Error(), "float64") {
		t.Errorf("float64 argument: %v", err)
	}
	err = d.Launch(k, []int{128}, []int{32}, x, y, float32(1), 1<<40, Local(128))
	if err == nil || !strings.Contains(err.Error(), "argument 3") {
		t.Errorf("overflowing int argument: %v", err)
	}
	if err := d.Launch(k, []int{128}, nil, x, y); err == nil || !strings.Contains(err.Error(), "takes 5") {
		t.Errorf("too few arguments: %v", err)
	}
	if err := d.Launch(k, []int{100}, []int{32}, x, y, float32(1), n, Local(128)); err == nil {
		t.Error("global not a multiple of local accepted")
	}
	// A wrong-sized scalar is caught by the driver and attributed to its index.
	if err := d.Launch(k2, []int{n}, nil, y, int32(3), uint32(4)); err == nil || !strings.Contains(err.Error(), "argument 1") {
		t.Errorf("int32 for a long parameter: %v", err)
	}
	if _, err := p.Kernel("no_such_kernel"); err == nil || !strings.Contains(err.Error(), "no_such_kernel") {
		t.Errorf("missing kernel: %v", err)
	}
}

func TestBuildErrorHasLogAndLine(t *testing.T) {
	d := open(t, Options{})
	src := "__kernel void f(__global float *y) {\n  int i = get_global_id(0);\n  y[i] = undeclared_thing_xyz * 2.0f;\n}\n"
	_, err := d.Build(src, "-DFOO=1")
	if err == nil {
		t.Fatal("build of a broken kernel succeeded")
	}
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("error %T is not a *BuildError: %v", err, err)
	}
	msg := err.Error()
	if !strings.Contains(be.Log, "undeclared_thing_xyz") || !strings.Contains(msg, be.Log) {
		t.Errorf("error lacks the build log: %v", err)
	}
	if !strings.Contains(msg, "line 3: y[i] = undeclared_thing_xyz * 2.0f;") {
		t.Errorf("error does not quote the offending line: %v", err)
	}
	if !strings.Contains(msg, "-DFOO=1") {
		t.Errorf("error does not name the options: %v", err)
	}
}

// TestDeferredCacheWrites checks Options.DeferCacheWrites: nothing is
// written at Build, WriteCache writes what was built (also for a program
// released meanwhile), Close writes the rest, and a later device loads the
// entries.
func TestDeferredCacheWrites(t *testing.T) {
	dir := t.TempDir()
	srcA := vecSrc + "\n// deferred A\n"
	srcB := vecSrc + "\n// deferred B\n"
	count := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
		return len(files)
	}
	d, err := Open(Options{CacheDir: dir, DeferCacheWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := d.Build(srcA, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 || d.Stats().CacheWrites != 0 {
		t.Fatalf("deferred build wrote %d cache files (stats %+v)", n, d.Stats())
	}
	pa.Release()
	d.WriteCache()
	if n := count(); n != 1 || d.Stats().CacheWrites != 1 {
		t.Fatalf("after WriteCache: %d files, stats %+v; want 1", n, d.Stats())
	}
	if _, err := d.Build(srcB, ""); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("after Close: %d cache files, want 2", n)
	}
	d2 := open(t, Options{CacheDir: dir})
	for _, src := range []string{srcA, srcB} {
		p, err := d2.Build(src, "")
		if err != nil {
			t.Fatal(err)
		}
		if !p.FromCache() {
			t.Errorf("a program whose write was deferred was not loaded from the cache")
		}
	}
}

func TestProgramCache(t *testing.T) {
	dir := t.TempDir()
	src := vecSrc + "\n// cache test\n"
	d1 := open(t, Options{CacheDir: dir})
	p1, err := d1.Build(src, "-DX=1")
	if err != nil {
		t.Fatal(err)
	}
	if p1.FromCache() || d1.Stats().Builds != 1 || d1.Stats().CacheWrites != 1 {
		t.Fatalf("cold build: fromCache=%v stats %+v", p1.FromCache(), d1.Stats())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache holds %d files, want 1", len(files))
	}

	d2 := open(t, Options{CacheDir: dir})
	p2, err := d2.Build(src, "-DX=1")
	if err != nil {
		t.Fatal(err)
	}
	if !p2.FromCache() || d2.Stats().CacheHits != 1 || d2.Stats().Builds != 0 {
		t.Fatalf("warm build: fromCache=%v stats %+v", p2.FromCache(), d2.Stats())
	}
	checkAxpb(t, d2, p2)
	// Other options are another program.
	p3, err := d2.Build(src, "-DX=2")
	if err != nil {
		t.Fatal(err)
	}
	if p3.FromCache() {
		t.Error("build with other options came from the cache")
	}

	// Corrupt every entry: the next build must ignore and rewrite them.
	files, _ = filepath.Glob(filepath.Join(dir, "*.bin"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x5A
		if err := os.WriteFile(f, data[:len(data)-7], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d3 := open(t, Options{CacheDir: dir})
	p4, err := d3.Build(src, "-DX=1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d3.Build(src, "-DX=2"); err != nil {
		t.Fatal(err)
	}
	if p4.FromCache() || d3.Stats().CacheRejects != 2 || d3.Stats().CacheWrites != 2 {
		t.Fatalf("corrupt entry: fromCache=%v stats %+v", p4.FromCache(), d3.Stats())
	}
	checkAxpb(t, d3, p4)
	p5, err := d3.Build(src, "-DX=1")
	if err != nil {
		t.Fatal(err)
	}
	if !p5.FromCache() {
		t.Error("rewritten cache entry was not used")
	}
	// A header-only or foreign file is rejected too.
	if err := os.WriteFile(files[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	d4 := open(t, Options{CacheDir: dir})
	for _, opt := range []string{"-DX=1", "-DX=2"} {
		if _, err := d4.Build(src, opt); err != nil {
			t.Fatal(err)
		}
	}
	if d4.Stats().CacheRejects != 1 || d4.Stats().CacheHits != 1 {
		t.Errorf("garbage entry: stats %+v", d4.Stats())
	}

	d5 := open(t, Options{CacheDir: "-"})
	if _, err := d5.Build(src, "-DX=1"); err != nil {
		t.Fatal(err)
	}
	if s := d5.Stats(); s.CacheHits != 0 || s.CacheWrites != 0 {
		t.Errorf("cache off: stats %+v", s)
	}
}

// checkAxpb runs axpb from p and checks one element, so that a cached
// binary is known to compute, not only to load.
func checkAxpb(t *testing.T, d *Device, p *Program) {
	t.Helper()
	k, err := p.Kernel("axpb")
	if err != nil {
		t.Fatal(err)
	}
	x, _ := d.Alloc(64 * 4)
	y, _ := d.Alloc(64 * 4)
	defer x.Release()
	defer y.Release()
	xs := make([]float32, 64)
	for i := range xs {
		xs[i] = float32(i)
	}
	d.Write(x, 0, f32bytes(xs))
	if err := d.Launch(k, []int{64}, []int{16}, x, y, float32(2), 64, Local(64)); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 64*4)
	if err := d.Read(y, 0, raw); err != nil {
		t.Fatal(err)
	}
	if got := bytesF32(raw)[10]; got != 2*10+64 {
		t.Errorf("cached program computed %v, want %v", got, 2*10+64)
	}
}

func TestPriority(t *testing.T) {
	for _, pr := range []Priority{PriorityLow, PriorityHigh} {
		d := open(t, Options{Priority: pr})
		inf := d.Info()
		switch inf.PriorityExt {
		case "":
			if inf.Priority != "default" {
				t.Errorf("%v on a device without a priority extension: Info().Priority = %q", pr, inf.Priority)
			}
		default:
			if inf.Priority != pr.String() && inf.Priority != "default" {
				t.Errorf("%v via %s: Info().Priority = %q", pr, inf.PriorityExt, inf.Priority)
			}
		}
		t.Logf("requested %v: ext %q applied %q", pr, inf.PriorityExt, inf.Priority)
		// The queue works whatever was applied.
		p, err := d.Build(vecSrc, "")
		if err != nil {
			t.Fatal(err)
		}
		checkAxpb(t, d, p)
	}
}

func TestProfile(t *testing.T) {
	d := open(t, Options{Profile: true})
	p, err := d.Build(vecSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := p.Kernel("addk")
	const n = 1 << 16
	y, _ := d.Alloc(4 * n)
	d.Fill(y, 0, 4*n, []byte{0, 0, 0, 0})
	labels := []string{"first", "second", "third"}
	for _, l := range labels {
		d.SetLabel(l)
		if err := d.Launch(k, []int{n}, nil, y, int64(1), uint32(2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	recs, err := d.Profile()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(labels) {
		t.Fatalf("%d records, want %d", len(recs), len(labels))
	}
	for i, r := range recs {
		if r.Label != labels[i] || r.Kernel != "addk" || r.Duration() <= 0 || r.Start < 0 {
			t.Errorf("record %d: %+v", i, r)
		}
		if i > 0 && r.Start < recs[i-1].End {
			t.Errorf("record %d starts at %v before record %d ends at %v on an in-order queue", i, r.Start, i-1, recs[i-1].End)
		}
	}
	if recs[0].Start != 0 {
		t.Errorf("first record starts at %v, want 0", recs[0].Start)
	}
	if more, _ := d.Profile(); len(more) != 0 {
		t.Errorf("second Profile returned %d old records", len(more))
	}
	d2 := open(t, Options{})
	if _, err := d2.Profile(); err == nil {
		t.Error("Profile without Options.Profile succeeded")
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	d, err := Open(Options{CacheDir: "-"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := d.Alloc(4096)
	s, _ := b.Sub(0, 128)
	p, err := d.Build(vecSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := p.Kernel("addk")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Everything is inert after Close.
	b.Release()
	s.Release()
	p.Release()
	k.Release()
	if _, err := d.Alloc(16); err == nil {
		t.Error("Alloc after Close succeeded")
	}
	if err := d.Launch(k, []int{1}, nil, s, int64(0), uint32(0)); err == nil {
		t.Error("Launch after Close succeeded")
	}
}

func TestLoaderErrors(t *testing.T) {
	// A missing file and a library that is not OpenCL (the C library, which
	// every tlite process has loaded, cgo or not) are both refused, with the
	// fix in the message.
	err := loadFrom([]string{"/nonexistent/libOpenCL.so", "libc.so.6"}, false)
	if err == nil {
		t.Fatal("loading a missing and a non-OpenCL library succeeded")
	}
	for _, want := range []string{"/nonexistent/libOpenCL.so", "clGetPlatformIDs", "apt-get install pocl-opencl-icd", "--device go", "TLITE_OPENCL_LIB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("loader error lacks %q: %v", want, err)
		}
	}
	if err := loadFrom(libraries(), false); err != nil {
		t.Errorf("the default library list finds no OpenCL library, yet tests run: %v", err)
	}
}

func TestLibraryCandidates(t *testing.T) {
	// Where phones keep their OpenCL driver; each must be tried on Android.
	android := defaultLibraries("android", true)
	for _, want := range []string{
		"libOpenCL.so",
		"/vendor/lib64/libOpenCL.so", "/system/vendor/lib64/libOpenCL.so", "/system/lib64/libOpenCL.so",
		"/vendor/lib64/libOpenCL_adreno.so", "/vendor/lib64/egl/libGLES_mali.so", "/vendor/lib64/libGLES_mali.so",
		"/vendor/lib64/libOpenCL-pixel.so",
	} {
		if !slices.Contains(android, want) {
			t.Errorf("android candidates lack %s: %v", want, android)
		}
	}
	if android[0] != "libOpenCL.so" {
		t.Errorf("android: the linker's own search (LD_LIBRARY_PATH) should come first, got %v", android)
	}
	for _, p := range defaultLibraries("android", false) {
		if strings.Contains(p, "lib64") {
			t.Errorf("32-bit android candidate %s is in a lib64 directory", p)
		}
	}
	if got := defaultLibraries("linux", true); !slices.Equal(got, []string{"libOpenCL.so.1", "libOpenCL.so"}) {
		t.Errorf("linux candidates %v", got)
	}

	// None of the phone paths exists here: the error names every one.
	err := loadFrom(android, false)
	if err == nil {
		t.Skip("an Android OpenCL library loaded on this machine")
	}
	for _, p := range android {
		if !strings.Contains(err.Error(), p+": ") {
			t.Errorf("the error does not name %s: %v", p, err)
		}
	}

	// The override replaces the search, and its failure is named.
	t.Setenv("TLITE_OPENCL_LIB", "/nonexistent/vendor/libOpenCL.so")
	if got := libraries(); !slices.Equal(got, []string{"/nonexistent/vendor/libOpenCL.so"}) {
		t.Errorf("with TLITE_OPENCL_LIB set, candidates are %v", got)
	}
	if err := loadFrom(libraries(), false); err == nil || !strings.Contains(err.Error(), "/nonexistent/vendor/libOpenCL.so") {
		t.Errorf("override error: %v", err)
	}
}

func TestLaunchDoesNotAllocate(t *testing.T) {
	d := open(t, Options{})
	p, err := d.Build(vecSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := p.Kernel("axpb")
	x, _ := d.Alloc(4 * 64)
	y, _ := d.Alloc(4 * 64)
	global, local := []int{64}, []int{16}
	allocs := testing.AllocsPerRun(50, func() {
		if err := d.Launch(k, global, local, x, y, float32(0.25), int32(64), Local(64)); err != nil {
			t.Fatal(err)
		}
	})
	d.Finish()
	if allocs != 0 {
		t.Errorf("Launch allocates %v times per call; the decode loop calls it thousands of times per token", allocs)
	}
}

func TestConcurrentLaunch(t *testing.T) {
	d := open(t, Options{Profile: true})
	p, err := d.Build(vecSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds, n = 4, 25, 256
	done := make(chan error, workers)
	bufs := make([]*Buffer, workers)
	for w := range bufs {
		bufs[w], _ = d.Alloc(4 * n)
		if err := d.Fill(bufs[w], 0, 4*n, []byte{0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	for w := 0; w < workers; w++ {
		go func(w int) {
			k, err := p.Kernel("addk") // a kernel per goroutine: arguments live in the kernel object
			if err != nil {
				done <- err
				return
			}
			for r := 0; r < rounds; r++ {
				d.SetLabel("w")
				if err := d.Launch(k, []int{n}, nil, bufs[w], int64(w), uint32(1)); err != nil {
					done <- err
					return
				}
			}
			done <- d.Finish()
		}(w)
	}
	for w := 0; w < workers; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for w, b := range bufs {
		raw := make([]byte, 4*n)
		if err := d.Read(b, 0, raw); err != nil {
			t.Fatal(err)
		}
		for i, v := range bytesF32(raw) {
			if want := float32(rounds * (w + 1)); v != want {
				t.Fatalf("worker %d element %d = %v, want %v", w, i, v, want)
			}
		}
	}
	recs, err := d.Profile()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != workers*rounds {
		t.Errorf("%d profile records, want %d", len(recs), workers*rounds)
	}
}
