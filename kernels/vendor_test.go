package kernels

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// vendorProfile is what the launchers see of one vendor's GPU driver: the
// device type (GPU selects the matmul and attention GPU kernel sets),
// cl_khr_fp16 (quant's fp16 arithmetic) and the OpenCL C versions its
// drivers accept with -cl-std.
type vendorProfile struct {
	name string
	fp16 bool
	stds []string
}

// vendorProfiles are the GPUs tlite is deployed on. Without -cl-std, which
// the launchers do not pass, every driver compiles OpenCL C 1.2; CL2.0 and
// CL3.0 are what the same drivers accept when asked.
var vendorProfiles = []vendorProfile{
	// Adreno 6xx/7xx: OpenCL 2.0 (3.0 on recent drivers), cl_khr_fp16.
	{"adreno", true, []string{"CL1.2", "CL2.0", "CL3.0"}},
	// Mali Bifrost/Valhall: OpenCL 2.x, 3.0 from the r2x drivers, cl_khr_fp16.
	{"mali", true, []string{"CL1.2", "CL2.0", "CL3.0"}},
	// NVIDIA-like desktop: OpenCL 3.0 with OpenCL C 1.2 and 3.0, no cl_khr_fp16.
	{"nvidia", false, []string{"CL1.2", "CL3.0"}},
}

// variantBuild is one program a launcher builds: a family's source with
// build options.
type variantBuild struct {
	family, src, options string
}

// gpuVariants lists programs the launchers build on a GPU, with or without
// cl_khr_fp16, through the launchers' own option helpers where they have
// one. Group sizes are the GPU value (128). With all false it is one
// program per family, the one with the most switches on (fp16 storage, GPU
// kernel sets); with all true it adds each storage switch on its own and
// the other formats, sizes and element types, which is what the OpenCL C
// 1.2 builds get. PoCL compiles a program in seconds, so the full product
// of switches (hundreds of programs) would take the suite's whole budget.
func gpuVariants(fp16, all bool) []variantBuild {
	var out []variantBuild
	add := func(family, src, options string) {
		out = append(out, variantBuild{family, src, strings.Join(strings.Fields(options), " ")})
	}
	attn := func(s Storage, hd int) string {
		masked := MaskedF32
		if s == F16 {
			masked = MaskedF16
		}
		return fmt.Sprintf("%s -DHD=%d -DMASKED_AT=%ef -DATT_GPU", s.define(), hd, float32(masked))
	}
	add("matmul", matmulProg(), gemm{at: F16, bt: F16, biasT: F16, ct: F16}.options(true)+regOpts(fp16))
	add("quant", quantProg(), qmm{w: QBuf{Format: quant.E0M4, Group: 128}, s: F16, bs: F16, hasBias: true}.options(fp16, false))
	add("attention", attentionProgSrc, attn(F16, 128)+attnHalfOpts(F16, fp16, false))
	add("norm", normSrc, fmt.Sprintf("%s -DGROUP=128 %s", F16.define(), weightDefine(F16)))
	add("conv", convSrc, F16.define()+" "+weightDefine(F16))
	add("softmax", softmaxSrc, F16.define()+" -DGROUP=128")
	add("reduce", reduceSrc, F16.define()+" -DGROUP=128")
	add("pool", poolSrc, F16.define())
	add("move", moveSrc, "-DELEM=ushort -DELEM16=ushort16")
	add("convtranspose", convTransposeSrc, F16.define()+" "+weightDefine(F16))
	add("volume", volumeSrc, F16.define()+" "+weightDefine(F16))
	add("resize", resizeSrc, F16.define()+" -cl-fp32-correctly-rounded-divide-sqrt")
	add("rotary", rotarySrc, F16.define())
	if all {
		add("matmul", matmulProg(), gemm{}.options(true))
		add("matmul", matmulProg(), gemm{at: F16}.options(true))
		add("matmul", matmulProg(), gemm{bt: F16, biasT: F16}.options(true))
		add("quant", quantProg(), qmm{w: QBuf{Format: quant.E0M4, Group: 32}}.options(fp16, false))
		add("quant", quantProg(), qmm{w: QBuf{Format: quant.Int4, Group: 128}, s: F16, bs: F32, hasBias: true}.options(fp16, false))
		add("attention", attentionProgSrc, attn(F32, 64))
		add("norm", normSrc, "-DGROUP=128")
		add("conv", convSrc, "")
		add("softmax", softmaxSrc, "-DGROUP=128")
		add("reduce", reduceSrc, "-DGROUP=128")
		add("pool", poolSrc, "")
		add("move", moveSrc, "-DELEM=ulong -DELEM16=ulong16")
		add("convtranspose", convTransposeSrc, "")
		add("volume", volumeSrc, "")
		add("rotary", rotarySrc, "")
		// resize builds without the exact-division option where a driver
		// refuses it.
		add("resize", resizeSrc, "")
	}
	// Element-wise chains are generated per model; this one has every unary
	// op at both storages, in the rank-3 and rank-6 programs.
	c := &Chain{}
	for _, st := range ewStorages {
		x, p := c.Input(st), c.Input(st)
		for _, u := range ewUnaryOps() {
			c.Output(u.build(c, st, x, p))
		}
	}
	src, err := c.Source()
	if err != nil {
		panic(err) // a test helper's chain: only a bug here gets this far
	}
	add("elementwise", src, "-DEW_RANK6 -DEW_B0_1")
	if all {
		add("elementwise", src, "-DEW_B0_0")
	}
	return out
}

// regOpts are mm_reg's options for fp16 operands.
func regOpts(fp16 bool) string {
	o, _ := gemm{at: F16, bt: F16}.regOptions(fp16)
	return o
}

// TestKernelsCompileForVendorProfiles builds the GPU variants (gpuVariants)
// under each OpenCL C version the Adreno, Mali and NVIDIA-like profiles
// would use, on the device present: the wide list under CL1.2, what the
// drivers compile by default, one program per family under CL2.0 and CL3.0. On PoCL this checks the sources against each language
// version's rules as Clang applies them; it cannot check the fp16 arithmetic
// path (quant's Q_HALF), because PoCL has no cl_khr_fp16, so those variants
// compile their fp32 fallback here; and it is no substitute for the vendors'
// own compilers.
func TestKernelsCompileForVendorProfiles(t *testing.T) {
	dev := testLib.Device()
	type key struct{ options, family, src string }
	done := map[key]string{} // build -> first profile that needed it
	var builds, hits int
	for _, prof := range vendorProfiles {
		if prof.fp16 && !dev.Info().FP16 {
			t.Logf("%s: device %s has no cl_khr_fp16: quant's fp16 arithmetic (Q_HALF) builds its fp32 fallback, unchecked", prof.name, dev.Info().Name)
		}
		for _, std := range prof.stds {
			if !slices.Contains(dev.Info().CVersions, strings.TrimPrefix(std, "CL")) {
				// PoCL 3.1 has OpenCL C 1.2 and 3.0, not 2.0: under -cl-std=CL2.0
				// its builtin headers lack the __global overloads of vload*.
				t.Logf("%s: %s unchecked: device %s compiles OpenCL C %v only", prof.name, std, dev.Info().Name, dev.Info().CVersions)
				continue
			}
			for _, v := range gpuVariants(prof.fp16, std == "CL1.2") {
				opts := strings.TrimSpace(v.options + " -cl-std=" + std)
				k := key{opts, v.family, v.src}
				if _, ok := done[k]; ok {
					continue
				}
				done[k] = prof.name
				p, err := dev.Build(commonSrc+"\n"+v.src, opts)
				if err != nil {
					t.Errorf("%s, %s: %s with %q: %v", prof.name, std, v.family, opts, err)
					continue
				}
				builds++
				if p.FromCache() {
					hits++
				}
				p.Release()
			}
		}
	}
	t.Logf("%d programs built (%d from the binary cache)", builds, hits)
	// Every kernel family (a .cl file beside the shared prefixes common.cl
	// and halfmath.cl) must be in the list, and halfmath.cl in the programs
	// that include it.
	if !slices.ContainsFunc(gpuVariants(true, false), func(v variantBuild) bool { return strings.Contains(v.src, halfMathSrc) }) {
		t.Errorf("no program in the vendor build list includes halfmath.cl")
	}
	files, err := filepath.Glob("*.cl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no .cl files found: %v", err)
	}
	for _, f := range files {
		fam := strings.TrimSuffix(f, ".cl")
		if fam != "common" && fam != "halfmath" && !slices.ContainsFunc(gpuVariants(true, false), func(v variantBuild) bool { return v.family == fam }) {
			t.Errorf("kernel family %s (%s) has no variants in the vendor build list", fam, f)
		}
	}
}
