package kernels

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/opencl"
)

// publishedDevice is a device description from testdata/devices: the
// queries a real driver answered, as published (each file names its
// source), so that variant selection is checked against the phones tlite
// is for without one at hand.
type publishedDevice struct {
	info     opencl.Info
	maxParam int // CL_DEVICE_MAX_PARAMETER_SIZE
}

func readPublishedDevice(t *testing.T, path string) publishedDevice {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d publishedDevice
	exts := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("%s: line %q is not key: value", path, line)
		}
		v = strings.TrimSpace(v)
		num := func() int {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, k, err)
			}
			return n
		}
		switch k {
		case "name":
			d.info.Name = v
		case "type":
			d.info.Type = v
		case "version":
			d.info.Version = v
		case "max_work_group":
			d.info.MaxWorkGroup = num()
		case "max_parameter_size":
			d.maxParam = num()
		case "extensions":
			exts = v
		default:
			t.Fatalf("%s: unknown key %q", path, k)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	d.info.Extensions, d.info.FP16, d.info.Subgroups, d.info.ImageFromBuffer, d.info.PriorityExt = capsFromExtensions(d.info.Version, exts)
	d.info.ComputeUnits = 1
	return d
}

// capsFromExtensions derives the capability flags from CL_DEVICE_VERSION
// and CL_DEVICE_EXTENSIONS by the rules opencl's describe applies (it also
// asks the device for sub-group counts and image pitch alignment, which a
// published list does not carry, so those fallbacks are left out here).
// The rules are restated because describe needs a live device; when
// opencl exposes them as a pure function, this should call it instead.
func capsFromExtensions(version, exts string) (list []string, fp16, subgroups, imageFromBuffer bool, priority string) {
	list = strings.Fields(exts)
	has := func(e string) bool { return slices.Contains(list, e) }
	ver := 0
	if f := strings.Fields(version); len(f) >= 2 {
		if maj, min, ok := strings.Cut(f[1], "."); ok {
			a, _ := strconv.Atoi(maj)
			b, _ := strconv.Atoi(min)
			ver = 10*a + b
		}
	}
	fp16 = has("cl_khr_fp16")
	subgroups = has("cl_khr_subgroups") || has("cl_intel_subgroups")
	imageFromBuffer = has("cl_khr_image2d_from_buffer")
	switch {
	case has("cl_khr_priority_hints") && ver >= 20:
		priority = "khr"
	case has("cl_qcom_priority_hint"):
		priority = "qcom"
	}
	return
}

// TestPublishedDevices parses the published extension lists of an Adreno
// 7xx, a Mali-G7x and an NVIDIA GPU and checks the kernel variants the
// launchers would select on each: the GPU kernel set everywhere, the fp16
// arithmetic path of the E0M4 GEMV only where cl_khr_fp16 is listed (not on
// NVIDIA's OpenCL, which lacks it; likewise the GPU attention kernels'
// half path, for fp16 activations), and every fused chain within the
// device's parameter limit.
func TestPublishedDevices(t *testing.T) {
	for _, tc := range []struct {
		file       string
		nexts      int
		fp16       bool
		subgroups  bool
		imageBuf   bool
		priority   string
		present    []string // extensions the phone paths look for
		absent     []string
		group      int // per-row work-group size the reductions use
		halfInQGEM bool
	}{
		{"adreno730.txt", 38, true, true, true, "qcom",
			[]string{"cl_qcom_perf_hint", "cl_qcom_reqd_sub_group_size", "cl_qcom_subgroup_shuffle", "cl_qcom_dot_product8"},
			[]string{"cl_khr_fp64", "cl_khr_priority_hints", "cl_khr_il_program"}, 128, true},
		{"mali-g72.txt", 19, true, false, true, "",
			[]string{"cl_arm_non_uniform_work_group_size", "cl_arm_printf"},
			[]string{"cl_khr_subgroups", "cl_khr_priority_hints", "cl_khr_fp64", "cl_qcom_perf_hint"}, 128, true},
		{"nvidia-rtx3050.txt", 25, false, false, false, "",
			[]string{"cl_khr_fp64", "cl_nv_pragma_unroll"},
			[]string{"cl_khr_fp16", "cl_khr_subgroups", "cl_khr_image2d_from_buffer"}, 128, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			d := readPublishedDevice(t, filepath.Join("testdata", "devices", tc.file))
			inf := d.info
			if len(inf.Extensions) != tc.nexts {
				t.Errorf("%d extensions parsed, want %d", len(inf.Extensions), tc.nexts)
			}
			if inf.FP16 != tc.fp16 || inf.Subgroups != tc.subgroups || inf.ImageFromBuffer != tc.imageBuf || inf.PriorityExt != tc.priority {
				t.Errorf("fp16 %v subgroups %v image-from-buffer %v priority %q, want %v %v %v %q",
					inf.FP16, inf.Subgroups, inf.ImageFromBuffer, inf.PriorityExt, tc.fp16, tc.subgroups, tc.imageBuf, tc.priority)
			}
			for _, e := range tc.present {
				if !slices.Contains(inf.Extensions, e) {
					t.Errorf("%s not found", e)
				}
			}
			for _, e := range tc.absent {
				if slices.Contains(inf.Extensions, e) {
					t.Errorf("%s found, the device does not list it", e)
				}
			}

			l := &Lib{dev: testLib.dev, as: &inf}
			// Packed weights are repacked into four-column tiles for the
			// phone GEMV; the columns-layout kernels remain for weights
			// that reach the device unrepacked.
			if lay := l.QuantLayout(); lay != QLayoutTile4 {
				t.Errorf("packed weight layout %v, want tile4", lay)
			}
			tiled := qmm{w: QBuf{Format: quant.E0M4, Group: 128, Layout: QLayoutTile4}, s: F16, m: 1}
			if name, _, _ := l.qpick(tiled); name != "qmt_r1" {
				t.Errorf("decode GEMV variant %s, want qmt_r1", name)
			}
			if o := tiled.options(l.info().FP16, l.info().Subgroups); strings.Contains(o, "-DQ_SG") != tc.subgroups || strings.Contains(o, "-DQ_HALF") != tc.halfInQGEM {
				t.Errorf("tiled decode GEMV build %q: want subgroups %v, half %v", o, tc.subgroups, tc.halfInQGEM)
			}
			if name, _, _ := l.qpick(qmm{m: 1}); name != "qmv_wg" {
				t.Errorf("columns-layout decode GEMV variant %s, want qmv_wg", name)
			}
			if name, _, _ := l.qpick(qmm{m: 64}); name != "qmm_4x2" {
				t.Errorf("prefill GEMM variant %s, want qmm_4x2", name)
			}
			i4 := qmm{w: QBuf{Format: quant.Int4, Group: 128, Layout: QLayoutTile4}, s: F16}
			if got := strings.Contains(i4.options(l.info().FP16, false), "-DHALF_MATH"); got != tc.halfInQGEM {
				t.Errorf("INT4 tiled fp16-storage build has half arithmetic = %v, want %v (%s)", got, tc.halfInQGEM, i4.options(l.info().FP16, false))
			}
			g := qmm{w: QBuf{Format: quant.E0M4, Group: 128}, s: F16}
			if got := strings.Contains(g.options(l.info().FP16, false), "-DQ_HALF"); got != tc.halfInQGEM {
				t.Errorf("E0M4 fp16-storage build has -DQ_HALF = %v, want %v (%s)", got, tc.halfInQGEM, g.options(l.info().FP16, false))
			}
			if v := attnVariant(l.info().Type, AttentionParams{Heads: 8, KVHeads: 2, SeqQ: 1}); v != "attn_wg" {
				t.Errorf("attention variant %s, want attn_wg", v)
			}
			if _, name := l.pick(gemm{m: 64, n: 64, k: 64, ak: 1, bk: 1, bn: 64}, l.info().Type == "GPU"); name != "mm_reg" {
				t.Errorf("GEMM variant for weights [N, K] %s, want mm_reg", name)
			}
			if _, name := l.pick(gemm{m: 64, n: 64, k: 64, ak: 1, bk: 64, bn: 1}, l.info().Type == "GPU"); name != "mm_tiled" {
				t.Errorf("GEMM variant for B [K, N] %s, want mm_tiled", name)
			}
			if name, _, _ := l.qpick(qmm{w: QBuf{Layout: QLayoutTile4}, m: 64}); name != "qmt_mm" {
				t.Errorf("tiled prefill GEMM variant %s, want qmt_mm", name)
			}
			if o, _ := (gemm{at: F16, bt: F16}).regOptions(l.info().FP16); strings.Contains(o, "-DHALF_MATH") != tc.halfInQGEM {
				t.Errorf("mm_reg fp16 build %q: want half arithmetic %v", o, tc.halfInQGEM)
			}
			// The GPU attention kernels' half path: on with cl_khr_fp16 for
			// fp16 activations only, and off when the Lib is told so.
			// Per launch, AttnFP32 never has it and AttnFP16 has it where
			// the device can (cl_khr_fp16 and fp16 storage: every
			// published device is a GPU) and is an error elsewhere, whatever
			// the Lib's default.
			const halfOpts = " -DATT_HALF -DHALF_MATH -cl-mad-enable"
			for _, off := range []bool{false, true} {
				l.SetAttentionHalf(!off)
				for _, st := range storages {
					can := tc.halfInQGEM && st == F16
					for _, pc := range []AttnPrecision{AttnAuto, AttnFP32, AttnFP16} {
						want := can && (pc == AttnFP16 || pc == AttnAuto && !off)
						o, err := l.attnHalfOptions(st, pc)
						switch {
						case pc == AttnFP16 && !can:
							if err == nil {
								t.Errorf("attention %s at %v: no error on a device or storage without half arithmetic (options %q)", st, pc, o)
							} else if cerr := l.CheckAttentionPrecision(st, pc); cerr == nil || cerr.Error() != err.Error() {
								t.Errorf("attention %s at %v: launch error %q, CheckAttentionPrecision %v", st, pc, err, cerr)
							}
						case err != nil:
							t.Errorf("attention %s at %v (default off %v): %v", st, pc, off, err)
						case want && o != halfOpts || !want && o != "":
							t.Errorf("attention %s at %v (default off %v): build options %q, want half arithmetic %v", st, pc, off, o, want)
						}
					}
				}
			}
			l.SetAttentionHalf(true)
			if !preferGroups(l) || groupSize(l) != tc.group {
				t.Errorf("row kernels: groups %v of %d, want groups of %d", preferGroups(l), groupSize(l), tc.group)
			}
			if _, local := l.cpuGroups([]int{100}); local != nil {
				t.Errorf("self-guarding launches fix local size %v on a GPU; the driver should choose", local)
			}
			if _, b := ChainKernelArgs(16, 8); b > d.maxParam || MaxKernelParamBytes > d.maxParam {
				t.Errorf("chain kernels may take %d bytes of arguments (cap %d); the device allows %d", b, MaxKernelParamBytes, d.maxParam)
			}
		})
	}
}
