package opencl

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// publishedExtensions reads the extensions line of a published device
// description in kernels/testdata/devices (each file names its source).
func publishedExtensions(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "kernels", "testdata", "devices", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "extensions:"); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("%s has no extensions line", file)
	return nil
}

// TestPerfHint: only a low-priority context on a device listing
// cl_qcom_perf_hint (the published Adreno 730) asks for the HIGH perf
// hint; the property list then carries both Qualcomm hints.
func TestPerfHint(t *testing.T) {
	adreno := publishedExtensions(t, "adreno730.txt")
	for _, tc := range []struct {
		file string
		p    Priority
		want uint64
	}{
		{"adreno730.txt", PriorityLow, clPerfHintHighQCOM},
		{"adreno730.txt", PriorityHigh, 0},
		{"adreno730.txt", PriorityDefault, 0},
		{"mali-g72.txt", PriorityLow, 0},
		{"nvidia-rtx3050.txt", PriorityLow, 0},
	} {
		exts := adreno
		if tc.file != "adreno730.txt" {
			exts = publishedExtensions(t, tc.file)
		}
		if got := perfHintFor(tc.p, exts); got != tc.want {
			t.Errorf("%s %v: perf hint %#x, want %#x", tc.file, tc.p, got, tc.want)
		}
	}
	// Qualcomm's public extension text: CL_CONTEXT_PERF_HINT_QCOM 0x40C2,
	// CL_PERF_HINT_HIGH/NORMAL/LOW_QCOM 0x40C3/0x40C4/0x40C5.
	if clCtxPerfHintQCOM != 0x40C2 || clPerfHintHighQCOM != 0x40C3 || clPerfHintNormalQCOM != 0x40C4 || clPerfHintLowQCOM != 0x40C5 {
		t.Error("cl_qcom_perf_hint values differ from the extension's")
	}
	got := contextProps(7, clPrioLowQCOM, clPerfHintHighQCOM)
	want := []uintptr{clContextPlatform, 7, clCtxPrioHintQCOM, clPrioLowQCOM, clCtxPerfHintQCOM, clPerfHintHighQCOM, 0}
	if !slices.Equal(got, want) {
		t.Errorf("context properties %#x, want %#x", got, want)
	}
	if got := contextProps(7, 0, 0); !slices.Equal(got, []uintptr{clContextPlatform, 7, 0}) {
		t.Errorf("no hints: %#x", got)
	}
	// PoCL has no Qualcomm extensions: a low priority applies no perf hint.
	d := open(t, Options{Priority: PriorityLow})
	if inf := d.Info(); inf.PerfHint != "" && !slices.Contains(inf.Extensions, "cl_qcom_perf_hint") {
		t.Errorf("perf hint %q applied without the extension", inf.PerfHint)
	}
}

// TestFlushEvery counts the flushes Launch makes.
func TestFlushEvery(t *testing.T) {
	for _, tc := range []struct{ every, launches, want int }{
		{3, 7, 2}, {-1, 7, 0}, {0, 70, 1}, {1, 4, 4},
	} {
		d := open(t, Options{FlushEvery: tc.every})
		p, err := d.Build(vecSrc, "")
		if err != nil {
			t.Fatal(err)
		}
		k, err := p.Kernel("addk")
		if err != nil {
			t.Fatal(err)
		}
		y, _ := d.Alloc(4 * 8)
		if err := d.Write(y, 0, make([]byte, 4*8)); err != nil {
			t.Fatal(err)
		}
		before := d.Stats().Flushes
		for i := 0; i < tc.launches; i++ {
			if err := d.Launch(k, []int{8}, nil, y, int64(1), uint32(0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Finish(); err != nil {
			t.Fatal(err)
		}
		if got := int(d.Stats().Flushes - before); got != tc.want {
			t.Errorf("FlushEvery %d, %d launches: %d flushes, want %d", tc.every, tc.launches, got, tc.want)
		}
		out := make([]byte, 4*8)
		if err := d.Read(y, 0, out); err != nil {
			t.Fatal(err)
		}
		if v := bytesF32(out)[5]; v != float32(tc.launches) {
			t.Errorf("after %d launches y = %v", tc.launches, v)
		}
	}
}

// TestLaunchChecksWorkGroup: the kernel's work-group limits are queried
// after the build and a local size it cannot take fails with the kernel
// and the sizes named, before the driver is asked.
func TestLaunchChecksWorkGroup(t *testing.T) {
	d := open(t, Options{})
	p, err := d.Build(vecSrc+`
__kernel __attribute__((reqd_work_group_size(8, 1, 1))) void fixed8(__global float *y) { y[get_global_id(0)] = 1.0f; }
`, "")
	if err != nil {
		t.Fatal(err)
	}
	k, err := p.Kernel("addk")
	if err != nil {
		t.Fatal(err)
	}
	if k.WorkGroupSize() <= 0 || k.PrivateMemSize() < 0 || k.RequiredWorkGroupSize() != [3]int{} {
		t.Errorf("addk: work-group size %d, private memory %d, required %v", k.WorkGroupSize(), k.PrivateMemSize(), k.RequiredWorkGroupSize())
	}
	y, _ := d.Alloc(4 * 16 * k.WorkGroupSize())
	big := 2 * k.WorkGroupSize()
	err = d.Launch(k, []int{big}, []int{big}, y, int64(1), uint32(0))
	if err == nil || !strings.Contains(err.Error(), "addk") || !strings.Contains(err.Error(), "CL_KERNEL_WORK_GROUP_SIZE") {
		t.Errorf("local size %d: error %v", big, err)
	}
	f, err := p.Kernel("fixed8")
	if err != nil {
		t.Fatal(err)
	}
	if f.RequiredWorkGroupSize() != [3]int{8, 1, 1} {
		t.Errorf("fixed8: required %v", f.RequiredWorkGroupSize())
	}
	err = d.Launch(f, []int{16}, []int{4}, y)
	if err == nil || !strings.Contains(err.Error(), "fixed8") || !strings.Contains(err.Error(), "reqd_work_group_size(8, 1, 1)") {
		t.Errorf("fixed8 at local 4: error %v", err)
	}
	if err := d.Launch(f, []int{16}, []int{8}, y); err != nil {
		t.Errorf("fixed8 at local 8: %v", err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}
