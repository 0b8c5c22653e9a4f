// Command kernelgate checks every OpenCL program tlite's kernel launchers
// build with compilers other than the device's, so that a team without a
// phone still learns when a kernel stops compiling for, or stops fitting,
// a phone GPU. It reads a build dump (kernels' TLITE_KERNEL_DUMP; the
// wrapper tools/kernelgate.sh makes one by running the kernel tests under
// each device profile) and runs three checks:
//
//   - compile: each (source, options) pair through clang for spir64 at
//     OpenCL C 1.2, 2.0 and 3.0 with cl_khr_fp16 on and off, translated to
//     SPIR-V by llvm-spirv and validated by spirv-val. Every optional
//     extension and feature is off except fp16 when on (-cl-ext=-all), the
//     smallest device each version allows, subgroups for programs
//     built for a device that has them (-DQ_SG, see extFlag), and images
//     (optional in OpenCL C 3.0) for programs that read them (-DQ_IMG).
//   - params: each kernel within SPIR-V's 255 function parameters and the
//     1 KiB of arguments CL_DEVICE_MAX_PARAMETER_SIZE guarantees.
//   - regs: each kernel a GPU selects (built under a gpu profile and not
//     forced by a test) compiled through libclc and llc for AMD gfx900, a
//     GPU with 32-bit registers per lane like Mali's and Adreno's, where
//     the code object reports the registers and spills the compiler chose
//     with no register limit of its own. A kernel fails above 64 vector
//     registers (Mali Valhall's per-thread register file at full
//     occupancy) or on any vector-register spill or scratch use. Scalar
//     (SGPR) spills are reported but do not fail: gfx900 keeps uniform
//     values such as kernel arguments in a scalar file phones lack, and
//     spills them into vector-register lanes, not memory (a spill that
//     does reach memory shows as scratch). libclc has no image reads for
//     gfx900, so the gate links its own (imageStub): a one-dimensional
//     buffer image read as AMD's drivers lower it, the image's descriptor
//     loaded into scalar registers and one buffer_load_format per texel.
//
// Known failures are listed, with reasons, in an allowlist file
// (-allow): each is reported every run, and an entry that no longer
// matches anything fails the gate, so the list only shrinks honestly.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Tools the gate runs; the Debian 12 packages that hold them are named in
// the error when one is missing.
var (
	clangBin  = "clang-15"
	spirvBin  = "llvm-spirv-15"
	valBin    = "spirv-val"
	llcBin    = "llc-15"
	disBin    = "llvm-dis-15"
	asBin     = "llvm-as-15"
	libclcBC  = "/usr/lib/clc/amdgcn--amdhsa.bc"
	debianPkg = "clang-15 llvm-15 llvm-spirv-15 spirv-tools libclc-15"
)

const (
	maxParams     = 255  // SPIR-V universal limit on function parameters
	maxParamBytes = 1024 // CL_DEVICE_MAX_PARAMETER_SIZE minimum (embedded and full profile)
	maxVGPRs      = 64
	regCPU        = "gfx900"
)

var stds = []string{"CL1.2", "CL2.0", "CL3.0"}

// spirvEnv is the spirv-val environment each OpenCL C version is checked
// against; spirv-val has none for 3.0, whose devices take SPIR-V 1.0-1.2
// as 2.2's do.
var spirvEnv = map[string]string{"CL1.2": "opencl1.2", "CL2.0": "opencl2.0", "CL3.0": "opencl2.2"}

// build is one line of builds.tsv.
type build struct {
	profile, how, family, hash, kernel, options string
}

// program is a unique (source, options) pair and what was built from it.
type program struct {
	family, hash, options string
	kernels               map[string]bool
	gpuKernels            map[bool]map[string]bool // fp16 -> kernels a GPU profile selected
}

// Result is one check's outcome, the unit the allowlist and --json speak.
type Result struct {
	Key    string `json:"key"`    // what the allowlist matches
	Check  string `json:"check"`  // compile, params or regs
	OK     bool   `json:"ok"`     // passed
	Known  string `json:"known"`  // allowlist reason when a failure is known
	Detail string `json:"detail"` // first error line, or the numbers
	// Set for regs and params.
	Kernel  string `json:"kernel,omitempty"`
	VGPRs   int    `json:"vgprs,omitempty"`
	SGPRs   int    `json:"sgprs,omitempty"`
	Spills  int    `json:"spills,omitempty"`  // vector registers spilled
	SSpills int    `json:"sspills,omitempty"` // scalar registers spilled (to vector lanes)
	Scratch int    `json:"scratch,omitempty"`
	Params  int    `json:"params,omitempty"`
	Bytes   int    `json:"bytes,omitempty"`
	// Set for compile.
	Std  string `json:"std,omitempty"`
	FP16 bool   `json:"fp16,omitempty"`
}

func main() {
	dump := flag.String("dump", "", "build dump directory (TLITE_KERNEL_DUMP)")
	allow := flag.String("allow", "", "allowlist of known failures (`file`)")
	jobs := flag.Int("j", runtime.NumCPU(), "compiler processes at once")
	asJSON := flag.Bool("json", false, "print every result as JSON instead of tables")
	keep := flag.Bool("keep", false, "keep the work directory (its path is printed)")
	toolsOnly := flag.Bool("tools", false, "only check that the compilers are installed")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: kernelgate -dump DIR [-allow FILE] [-j N] [-json] [-keep] | kernelgate -tools\n\n"+
			"Compiles every dumped kernel program for spir64 (OpenCL C 1.2/2.0/3.0, fp16 on/off),\n"+
			"validates the SPIR-V, checks kernel parameter limits and the register use of the\n"+
			"GPU kernel set on %s. Run it through tools/kernelgate.sh, which makes the dump.\n\n", regCPU)
		flag.PrintDefaults()
	}
	flag.Parse()
	if *toolsOnly {
		if err := checkTools(); err != nil {
			fmt.Fprintln(os.Stderr, "kernelgate:", err)
			os.Exit(1)
		}
		return
	}
	if *dump == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*dump, *allow, *jobs, *asJSON, *keep, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kernelgate:", err)
		os.Exit(1)
	}
}

func run(dump, allowPath string, jobs int, asJSON, keep bool, out io.Writer) error {
	if err := checkTools(); err != nil {
		return err
	}
	progs, nbuilds, err := readDump(dump)
	if err != nil {
		return err
	}
	allow, err := readAllow(allowPath)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "kernelgate-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "kernelgate: work directory", work)
	} else {
		defer os.RemoveAll(work)
	}
	stub, err := writeImageStub(work)
	if err != nil {
		return err
	}
	start := time.Now()
	results := checkAll(dump, work, stub, progs, max(jobs, 1))
	elapsed := time.Since(start)

	var unknown, known []*Result
	for _, r := range results {
		if r.OK {
			continue
		}
		if reason, ok := allow.match(r.Key); ok {
			r.Known = reason
			known = append(known, r)
		} else {
			unknown = append(unknown, r)
		}
	}
	stale := allow.unused()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Programs int       `json:"programs"`
			Builds   int       `json:"builds"`
			Seconds  float64   `json:"seconds"`
			Results  []*Result `json:"results"`
			Stale    []string  `json:"stale_allowlist"`
		}{len(progs), nbuilds, elapsed.Seconds(), results, stale}); err != nil {
			return err
		}
	} else {
		report(out, progs, nbuilds, results, known, unknown, stale, elapsed)
	}
	if len(unknown) > 0 || len(stale) > 0 {
		return fmt.Errorf("%d new failures, %d stale allowlist entries", len(unknown), len(stale))
	}
	return nil
}

func checkTools() error {
	var missing []string
	for _, t := range []string{clangBin, spirvBin, valBin, llcBin, disBin, asBin} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if _, err := os.Stat(libclcBC); err != nil {
		missing = append(missing, libclcBC)
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (Debian 12: apt-get install %s)", strings.Join(missing, ", "), debianPkg)
	}
	return nil
}

// readDump reads builds.tsv into unique programs, sorted for a stable report.
func readDump(dir string) ([]*program, int, error) {
	f, err := os.Open(filepath.Join(dir, "builds.tsv"))
	if err != nil {
		return nil, 0, fmt.Errorf("read dump: %w", err)
	}
	defer f.Close()
	byKey := map[string]*program{}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) != 6 {
			return nil, 0, fmt.Errorf("%s/builds.tsv:%d: %d fields, want 6 (profile, how, family, hash, kernel, options)", dir, line, len(fs))
		}
		b := build{fs[0], fs[1], fs[2], fs[3], fs[4], fs[5]}
		n++
		key := b.hash + "\x00" + b.options
		p := byKey[key]
		if p == nil {
			p = &program{family: b.family, hash: b.hash, options: b.options, kernels: map[string]bool{}, gpuKernels: map[bool]map[string]bool{}}
			byKey[key] = p
		}
		p.kernels[b.kernel] = true
		if strings.HasPrefix(b.profile, "gpu") && b.how == "selected" {
			fp16 := strings.HasSuffix(b.profile, "-fp16")
			if p.gpuKernels[fp16] == nil {
				p.gpuKernels[fp16] = map[string]bool{}
			}
			p.gpuKernels[fp16][b.kernel] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("read dump: %w", err)
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("%s/builds.tsv records no builds", dir)
	}
	progs := make([]*program, 0, len(byKey))
	for _, p := range byKey {
		progs = append(progs, p)
	}
	sort.Slice(progs, func(i, j int) bool {
		if progs[i].family != progs[j].family {
			return progs[i].family < progs[j].family
		}
		return progs[i].options < progs[j].options
	})
	return progs, n, nil
}

// checkAll runs every check on a pool of jobs workers.
func checkAll(dump, work, stub string, progs []*program, jobs int) []*Result {
	var tasks []func() []*Result
	for i, p := range progs {
		src := filepath.Join(dump, "src", p.hash+".cl")
		for _, std := range stds {
			for _, fp16 := range []bool{false, true} {
				tasks = append(tasks, func() []*Result {
					return compileCheck(work, i, p, src, std, fp16)
				})
			}
		}
		for _, fp16 := range []bool{false, true} {
			if ks := p.gpuKernels[fp16]; len(ks) > 0 {
				tasks = append(tasks, func() []*Result {
					return regCheck(work, stub, i, p, src, fp16, ks)
				})
			}
		}
	}
	results := make([][]*Result, len(tasks))
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t := int(next.Add(1)) - 1
				if t >= len(tasks) {
					return
				}
				results[t] = tasks[t]()
				if d := done.Add(1); d%50 == 0 || int(d) == len(tasks) {
					fmt.Fprintf(os.Stderr, "kernelgate: %d/%d compiles\n", d, len(tasks))
				}
			}
		}()
	}
	wg.Wait()
	var all []*Result
	for _, rs := range results {
		all = append(all, rs...)
	}
	return all
}

func fp16Word(on bool) string {
	if on {
		return "fp16-on"
	}
	return "fp16-off"
}

// extFlag turns every optional extension and feature off but cl_khr_fp16
// when fp16 is on, and subgroups (cl_khr_subgroups and OpenCL C 3.0's
// __opencl_c_subgroups) when the program was built for a device that has
// them: its launcher then passes one of subgroupOptions, and the kernels' subgroup
// code is compiled and validated rather than their fallback.
func extFlag(fp16 bool, options string) string {
	f := "-cl-ext=-all"
	if fp16 {
		f += ",+cl_khr_fp16"
	}
	fs := strings.Fields(options)
	for _, o := range fs {
		if slices.Contains(subgroupOptions, o) {
			f += ",+cl_khr_subgroups,+__opencl_c_subgroups"
			break
		}
	}
	for _, o := range fs {
		if slices.Contains(imageOptions, o) {
			f += ",+__opencl_c_images"
			break
		}
	}
	return f
}

// subgroupOptions are the build options kernels' launchers add where the
// device lists subgroups (quant.cl's tiled GEMV, matmul.cl's mm_gemv_c4).
var subgroupOptions = []string{"-DQ_SG", "-DMM_SG"}

// imageOptions are the build options of programs that read images
// through image1d_buffer_t (quant.cl's tiled GEMV, matmul.cl's
// mm_gemv_c4); launchers add them only on devices with images.
var imageOptions = []string{"-DQ_IMG", "-DMM_IMG"}

// imageStub defines the OpenCL image reads the kernels use for gfx900,
// which libclc lacks (without it llc compiles each read as a call to an
// unknown function and reserves 16 KiB of scratch): an image1d_buffer_t
// is a pointer to the image's 128-bit buffer descriptor, read with
// buffer_load_format (llvm.amdgcn.struct.buffer.load.format, index
// addressing), as AMD's own OpenCL lowers a buffer image read.
const imageStub = `target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7"
target triple = "amdgcn-unknown-amdhsa"
declare <4 x i32> @llvm.amdgcn.struct.buffer.load.format.v4i32(<4 x i32>, i32, i32, i32, i32 immarg)
declare <4 x float> @llvm.amdgcn.struct.buffer.load.format.v4f32(<4 x i32>, i32, i32, i32, i32 immarg)
define linkonce_odr hidden <4 x i32> @_Z12read_imageui21ocl_image1d_buffer_roi(ptr addrspace(4) %im, i32 %i) alwaysinline {
  %d = load <4 x i32>, ptr addrspace(4) %im, align 16
  %v = call <4 x i32> @llvm.amdgcn.struct.buffer.load.format.v4i32(<4 x i32> %d, i32 %i, i32 0, i32 0, i32 0)
  ret <4 x i32> %v
}
define linkonce_odr hidden <4 x float> @_Z11read_imagef21ocl_image1d_buffer_roi(ptr addrspace(4) %im, i32 %i) alwaysinline {
  %d = load <4 x i32>, ptr addrspace(4) %im, align 16
  %v = call <4 x float> @llvm.amdgcn.struct.buffer.load.format.v4f32(<4 x i32> %d, i32 %i, i32 0, i32 0, i32 0)
  ret <4 x float> %v
}
`

// writeImageStub assembles imageStub into work and returns its path.
func writeImageStub(work string) (string, error) {
	ll, bc := filepath.Join(work, "imagestub.ll"), filepath.Join(work, "imagestub.bc")
	if err := os.WriteFile(ll, []byte(imageStub), 0o644); err != nil {
		return "", err
	}
	if err := runTool(asBin, ll, "-o", bc); err != nil {
		return "", fmt.Errorf("image read stub: %w", err)
	}
	return bc, nil
}

func runTool(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %s", name, firstError(buf.String(), err))
	}
	return nil
}

// firstError is the first line of a tool's output that reads like an error.
func firstError(log string, err error) string {
	lines := strings.Split(log, "\n")
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), "error") {
			return strings.TrimSpace(l)
		}
	}
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return strings.TrimSpace(l)
		}
	}
	return err.Error()
}

// compileCheck compiles p for spir64 at std, translates and validates it,
// and for CL1.2 with fp16 on also checks each kernel's parameters.
func compileCheck(work string, i int, p *program, src, std string, fp16 bool) []*Result {
	base := filepath.Join(work, fmt.Sprintf("p%03d-%s-%s", i, std, fp16Word(fp16)))
	r := &Result{Check: "compile", Std: std, FP16: fp16,
		Key: fmt.Sprintf("compile %s %s %s [%s]", std, fp16Word(fp16), p.family, p.options)}
	args := []string{"-x", "cl", "-cl-std=" + std, "-target", "spir64-unknown-unknown",
		"-Xclang", "-finclude-default-header", "-Xclang", extFlag(fp16, p.options), "-O0", "-c", "-emit-llvm"}
	args = append(args, strings.Fields(p.options)...)
	args = append(args, "-o", base+".bc", src)
	err := runTool(clangBin, args...)
	if err == nil {
		err = runTool(spirvBin, "--spirv-max-version=1.2", base+".bc", "-o", base+".spv")
	}
	if err == nil {
		err = runTool(valBin, "--target-env", spirvEnv[std], base+".spv")
	}
	var out []*Result
	if err != nil {
		r.Detail = err.Error()
	} else {
		r.OK = true
	}
	out = append(out, r)
	if std == "CL1.2" && fp16 {
		out = append(out, paramCheck(base+".bc", p)...)
	}
	return out
}

// paramCheck counts each kernel's parameters and their bytes in the LLVM
// IR clang made for spir64 (pointers are 8 bytes there, as on phones).
func paramCheck(bc string, p *program) []*Result {
	r := func(k string) *Result {
		return &Result{Check: "params", Kernel: k, Key: fmt.Sprintf("params %s %s [%s]", p.family, k, p.options)}
	}
	ll, err := exec.Command(disBin, bc, "-o", "-").Output()
	if err != nil {
		var out []*Result
		for k := range p.kernels {
			x := r(k)
			x.Detail = "no IR to read parameters from (the compile failed)"
			out = append(out, x)
		}
		return out
	}
	sigs := kernelSignatures(string(ll))
	var out []*Result
	for _, k := range sortedKeys(p.kernels) {
		x := r(k)
		params, ok := sigs[k]
		if !ok {
			x.Detail = "kernel not found in the IR"
			out = append(out, x)
			continue
		}
		x.Params = len(params)
		for _, t := range params {
			x.Bytes += typeBytes(t)
		}
		x.OK = x.Params <= maxParams && x.Bytes <= maxParamBytes
		x.Detail = fmt.Sprintf("%d parameters, %d bytes (limits %d, %d)", x.Params, x.Bytes, maxParams, maxParamBytes)
		out = append(out, x)
	}
	return out
}

var defineRe = regexp.MustCompile(`(?m)^define [^@]*spir_kernel void @([A-Za-z_][A-Za-z0-9_]*)\(`)

// kernelSignatures maps each kernel in ll to its parameter list.
func kernelSignatures(ll string) map[string][]string {
	sigs := map[string][]string{}
	for _, m := range defineRe.FindAllStringSubmatchIndex(ll, -1) {
		name := ll[m[2]:m[3]]
		depth, start := 0, m[1]
		var params []string
	scan:
		for j := m[1]; j < len(ll); j++ {
			switch ll[j] {
			case '(', '<', '[', '{':
				depth++
			case ')', '>', ']', '}':
				if depth == 0 {
					if s := strings.TrimSpace(ll[start:j]); s != "" {
						params = append(params, s)
					}
					break scan
				}
				depth--
			case ',':
				if depth == 0 {
					params = append(params, strings.TrimSpace(ll[start:j]))
					start = j + 1
				}
			}
		}
		sigs[name] = params
	}
	return sigs
}

var vecRe = regexp.MustCompile(`^<(\d+) x ([a-z0-9]+)>`)

// typeBytes is the argument size of an LLVM IR parameter on spir64.
func typeBytes(param string) int {
	if m := vecRe.FindStringSubmatch(param); m != nil {
		n, _ := strconv.Atoi(m[1])
		if n == 3 {
			n = 4 // OpenCL's 3-vectors take the room of 4
		}
		return n * typeBytes(m[2])
	}
	t := strings.Fields(param)[0]
	switch {
	case strings.Contains(param, "*") || t == "ptr":
		return 8
	case t == "half" || t == "i16":
		return 2
	case t == "float" || t == "i32":
		return 4
	case t == "double" || t == "i64":
		return 8
	case t == "i8" || t == "i1":
		return 1
	}
	return 8
}

// regCheck compiles p for gfx900 through libclc (and the image stub) and
// llc and reads each GPU kernel's register use from the code object's
// metadata.
func regCheck(work, stub string, i int, p *program, src string, fp16 bool, kernels map[string]bool) []*Result {
	base := filepath.Join(work, fmt.Sprintf("p%03d-gcn-%s", i, fp16Word(fp16)))
	prof := "gpu"
	if fp16 {
		prof = "gpu-fp16"
	}
	mk := func(k string) *Result {
		return &Result{Check: "regs", Kernel: k, FP16: fp16, Key: fmt.Sprintf("regs %s %s %s [%s]", prof, p.family, k, p.options)}
	}
	ext := "-cl-ext=-cl_khr_fp16"
	if fp16 {
		ext = "-cl-ext=+cl_khr_fp16"
	}
	args := []string{"-x", "cl", "-cl-std=CL1.2", "-nogpulib", "-target", "amdgcn-unknown-amdhsa", "-mcpu=" + regCPU,
		"-Xclang", "-finclude-default-header", "-Xclang", "-mlink-builtin-bitcode", "-Xclang", libclcBC,
		"-Xclang", "-mlink-builtin-bitcode", "-Xclang", stub,
		"-Xclang", ext, "-O2", "-c", "-emit-llvm"}
	args = append(args, strings.Fields(p.options)...)
	args = append(args, "-o", base+".bc", src)
	err := runTool(clangBin, args...)
	if err == nil {
		err = runTool(llcBin, "-O2", "-mtriple=amdgcn-unknown-amdhsa", "-mcpu="+regCPU, base+".bc", "-o", base+".s")
	}
	var meta map[string]map[string]string
	if err == nil {
		var asm []byte
		asm, err = os.ReadFile(base + ".s")
		meta = kernelMeta(string(asm))
	}
	var out []*Result
	for _, k := range sortedKeys(kernels) {
		r := mk(k)
		out = append(out, r)
		if err != nil {
			r.Detail = err.Error()
			continue
		}
		m, ok := meta[k]
		if !ok {
			r.Detail = "kernel missing from the code object metadata"
			continue
		}
		num := func(f string) int {
			n, _ := strconv.Atoi(m[f])
			return n
		}
		r.VGPRs, r.SGPRs = num(".vgpr_count"), num(".sgpr_count")
		r.Spills, r.SSpills = num(".vgpr_spill_count"), num(".sgpr_spill_count")
		r.Scratch = num(".private_segment_fixed_size")
		r.OK = r.VGPRs <= maxVGPRs && r.Spills == 0 && r.Scratch == 0
		r.Detail = fmt.Sprintf("%d VGPRs, %d VGPR spills, %d bytes scratch per lane (%d SGPRs, %d SGPR spills)", r.VGPRs, r.Spills, r.Scratch, r.SGPRs, r.SSpills)
	}
	return out
}

// kernelMeta reads the amdhsa.kernels list of an llc assembly listing:
// kernel name -> top-level field -> value.
func kernelMeta(asm string) map[string]map[string]string {
	out := map[string]map[string]string{}
	in := false
	var cur map[string]string
	flush := func() {
		if cur != nil && cur[".name"] != "" {
			out[cur[".name"]] = cur
		}
		cur = nil
	}
	for _, l := range strings.Split(asm, "\n") {
		switch {
		case strings.HasPrefix(l, "amdhsa.kernels:"):
			in = true
			continue
		case in && !strings.HasPrefix(l, " "):
			flush()
			in = false
		}
		if !in {
			continue
		}
		if strings.HasPrefix(l, "  - ") {
			flush()
			cur = map[string]string{}
			l = "    " + l[4:]
		}
		// Kernel fields sit at four spaces; deeper ones belong to .args.
		if cur != nil && strings.HasPrefix(l, "    .") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
				cur[k] = strings.TrimSpace(v)
			}
		}
	}
	flush()
	return out
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// allowlist is the committed list of known failures.
type allowlist struct {
	entries []allowEntry
}

type allowEntry struct {
	pattern *regexp.Regexp
	text    string
	reason  string
	used    bool
}

// readAllow reads "REGEXP | reason" lines; '#' starts a comment line.
func readAllow(path string) (*allowlist, error) {
	a := &allowlist{}
	if path == "" {
		return a, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("allowlist: %w", err)
	}
	for n, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		pat, reason, ok := strings.Cut(l, " | ")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want \"REGEXP | reason\"", path, n+1)
		}
		re, err := regexp.Compile("^(?:" + strings.TrimSpace(pat) + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n+1, err)
		}
		a.entries = append(a.entries, allowEntry{pattern: re, text: strings.TrimSpace(pat), reason: strings.TrimSpace(reason)})
	}
	return a, nil
}

func (a *allowlist) match(key string) (string, bool) {
	for i := range a.entries {
		if a.entries[i].pattern.MatchString(key) {
			a.entries[i].used = true
			return a.entries[i].reason, true
		}
	}
	return "", false
}

func (a *allowlist) unused() []string {
	var out []string
	for _, e := range a.entries {
		if !e.used {
			out = append(out, e.text)
		}
	}
	return out
}

func report(w io.Writer, progs []*program, nbuilds int, results, known, unknown []*Result, stale []string, elapsed time.Duration) {
	fmt.Fprintf(w, "kernelgate: %d programs (source, options) from %d recorded builds; %.0fs\n\n", len(progs), nbuilds, elapsed.Seconds())
	type cell struct{ pass, known, fail int }
	comp := map[string]*cell{}
	var params, regs []*Result
	for _, r := range results {
		switch r.Check {
		case "compile":
			k := r.Std + " " + fp16Word(r.FP16)
			if comp[k] == nil {
				comp[k] = &cell{}
			}
			c := comp[k]
			switch {
			case r.OK:
				c.pass++
			case r.Known != "":
				c.known++
			default:
				c.fail++
			}
		case "params":
			params = append(params, r)
		case "regs":
			regs = append(regs, r)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "compile: clang-15 spir64 -> llvm-spirv-15 (SPIR-V 1.2) -> spirv-val")
	fmt.Fprintln(tw, "std\tfp16\tpass\tknown\tfail")
	for _, std := range stds {
		for _, fp16 := range []bool{false, true} {
			c := comp[std+" "+fp16Word(fp16)]
			if c == nil {
				c = &cell{}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", std, fp16Word(fp16), c.pass, c.known, c.fail)
		}
	}
	tw.Flush()
	np, pf := 0, 0
	for _, r := range params {
		np++
		if !r.OK {
			pf++
		}
	}
	fmt.Fprintf(w, "\nparams: %d kernels, %d over %d parameters or %d bytes\n", np, pf, maxParams, maxParamBytes)
	for _, r := range params {
		if !r.OK {
			fmt.Fprintf(w, "  %s: %s\n", r.Key, r.Detail)
		}
	}
	fmt.Fprintf(w, "\nregs: GPU kernel set on %s via libclc + llc-15 (fail above %d VGPRs, on VGPR spills or scratch)\n", regCPU, maxVGPRs)
	sort.SliceStable(regs, func(i, j int) bool { return regs[i].Key < regs[j].Key })
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "verdict\tVGPRs\tvspill\tscratch\tSGPRs\tsspill\tkernel")
	for _, r := range regs {
		v := "ok"
		switch {
		case r.OK:
		case r.Known != "":
			v = "KNOWN"
		default:
			v = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", v, r.VGPRs, r.Spills, r.Scratch, r.SGPRs, r.SSpills, strings.TrimPrefix(r.Key, "regs "))
	}
	tw.Flush()
	if len(known) > 0 {
		fmt.Fprintf(w, "\nknown failures (allowlist): %d\n", len(known))
		for _, r := range known {
			fmt.Fprintf(w, "  %s\n    %s\n    known: %s\n", r.Key, r.Detail, r.Known)
		}
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "\nNEW FAILURES: %d\n", len(unknown))
		for _, r := range unknown {
			fmt.Fprintf(w, "  %s\n    %s\n", r.Key, r.Detail)
		}
	}
	if len(stale) > 0 {
		fmt.Fprintf(w, "\nSTALE allowlist entries (match nothing; delete them): %d\n", len(stale))
		for _, s := range stale {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	if len(unknown) == 0 && len(stale) == 0 {
		fmt.Fprintln(w, "\nkernelgate: pass")
	}
}
