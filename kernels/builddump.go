package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tlite/tlite/opencl"
)

// Build dumps let tools/kernelgate.sh check every program the launchers
// build with compilers other than the device's (clang for SPIR-V, llc for a
// GPU's register use) on a machine without a phone. They are taken from the
// build path itself, so a new variant cannot be missed by a hand list:
//
//	TLITE_KERNEL_DUMP=DIR      every Lib records each kernel it builds in DIR
//	TLITE_KERNEL_PROFILE=P     every Lib picks variants as if its device were
//	                           P: cpu, cpu-fp16, gpu or gpu-fp16 (the device's
//	                           own type and cl_khr_fp16 when unset)
//	TLITE_KERNEL_HALF_EMU=1    every Lib builds the GPU attention kernels'
//	                           half path, where it is selected, in
//	                           halfmath.cl's exact float emulation
//	                           (-DHALF_EMU): with P = gpu-fp16 a whole model
//	                           runs with half attention on PoCL, which has
//	                           no half arithmetic (0 or unset: off)
//
// DIR gets src/HASH.cl, the exact text handed to the compiler, and one line
// per (program, kernel) in builds.tsv: profile, "selected" or "forced",
// family, HASH, kernel name, options, tab-separated. "forced" marks a build
// a test override (mmForce and the like) chose rather than the profile's own
// selection, so that the gate can tell the kernels a GPU really runs from
// CPU variants a test forced under the gpu profile. Many processes may share DIR (go test runs
// packages in parallel): sources are written whole and renamed into place,
// and each line is one append.
const (
	envDump    = "TLITE_KERNEL_DUMP"
	envProfile = "TLITE_KERNEL_PROFILE"
	envHalfEmu = "TLITE_KERNEL_HALF_EMU"
)

// profile is a device description forced onto variant selection.
type profile struct {
	name string
	gpu  bool
	fp16 bool
	// subgroups marks the phone GPU profile: gpu-fp16 stands for the
	// Adreno 7xx and Mali Valhall class, which have cl_khr_fp16 and
	// cl_khr_subgroups; gpu for a GPU with neither (NVIDIA's OpenCL).
	subgroups bool
}

var profiles = map[string]profile{
	"cpu":      {"cpu", false, false, false},
	"cpu-fp16": {"cpu-fp16", false, true, false},
	"gpu":      {"gpu", true, false, false},
	"gpu-fp16": {"gpu-fp16", true, true, true},
}

// parseProfile returns the profile named s; "" is none.
func parseProfile(s string) (*profile, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	p, ok := profiles[s]
	if !ok {
		return nil, fmt.Errorf("kernels: %s=%q: want cpu, cpu-fp16, gpu or gpu-fp16", envProfile, s)
	}
	return &p, nil
}

// info is the device description the launchers choose variants by: the
// device's own, or l.as where a profile (or a test standing in for a
// published device) replaces it. A profile changes only the type and
// cl_khr_fp16; work-group limits and compute units stay the device's,
// because launches still run on it.
func (l *Lib) info() opencl.Info {
	if l.as != nil {
		return *l.as
	}
	l.infoOnce.Do(func() { l.devInf = l.dev.Info() })
	// A copy of the struct; its lists are shared and only read.
	inf := l.devInf
	if l.prof != nil {
		inf.Type = "CPU"
		if l.prof.gpu {
			inf.Type = "GPU"
		}
		inf.FP16 = l.prof.fp16
		if l.prof.gpu {
			inf.Subgroups = l.prof.subgroups
		}
	}
	return inf
}

// profileName names the variant selection in dump lines.
func (l *Lib) profileName() string {
	if l.prof != nil {
		return l.prof.name
	}
	inf := l.dev.Info()
	name := strings.ToLower(inf.Type)
	if inf.FP16 {
		name += "-fp16"
	}
	return name
}

// buildDump records builds in a directory (see envDump).
type buildDump struct {
	dir  string
	mu   sync.Mutex
	srcs map[string]bool // hashes already written by this process
}

// dumps holds one buildDump per directory, so that every Lib of a process
// shares the record of which sources are written.
var (
	dumpsMu sync.Mutex
	dumps   = map[string]*buildDump{}
)

func openDump(dir string) (*buildDump, error) {
	dumpsMu.Lock()
	defer dumpsMu.Unlock()
	if d, ok := dumps[dir]; ok {
		return d, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		return nil, fmt.Errorf("kernels: %s: %w", envDump, err)
	}
	d := &buildDump{dir: dir, srcs: map[string]bool{}}
	dumps[dir] = d
	return d, nil
}

// record writes one build: the full source once, and a line for it.
func (d *buildDump) record(prof, how, family, src, options, kernel string) error {
	sum := sha256.Sum256([]byte(src))
	hash := hex.EncodeToString(sum[:8])
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.srcs[hash] {
		path := filepath.Join(d.dir, "src", hash+".cl")
		if _, err := os.Stat(path); err != nil {
			tmp, err := os.CreateTemp(filepath.Dir(path), "."+hash+"-*")
			if err != nil {
				return fmt.Errorf("kernels: build dump: %w", err)
			}
			_, werr := tmp.WriteString(src)
			cerr := tmp.Close()
			if werr == nil {
				werr = cerr
			}
			if werr == nil {
				werr = os.Rename(tmp.Name(), path)
			}
			if werr != nil {
				os.Remove(tmp.Name())
				return fmt.Errorf("kernels: build dump: %w", werr)
			}
		}
		d.srcs[hash] = true
	}
	f, err := os.OpenFile(filepath.Join(d.dir, "builds.tsv"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("kernels: build dump: %w", err)
	}
	_, err = fmt.Fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\n", prof, how, family, hash, kernel, options)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("kernels: build dump: %w", err)
	}
	return nil
}

// configureFromEnv applies envDump, envProfile and envHalfEmu to a new
// Lib. A bad setting is kept as an error that every build returns, so a
// dump run fails loudly instead of silently recording nothing.
func (l *Lib) configureFromEnv() {
	if p, err := parseProfile(os.Getenv(envProfile)); err != nil {
		l.envErr = err
	} else {
		l.prof = p
	}
	switch v := strings.TrimSpace(os.Getenv(envHalfEmu)); v {
	case "", "0":
	case "1":
		l.attnEmu = true
	default:
		l.envErr = fmt.Errorf("kernels: %s=%q: want 1 or 0", envHalfEmu, v)
	}
	if dir := os.Getenv(envDump); dir != "" {
		d, err := openDump(dir)
		if err != nil {
			l.envErr = err
			return
		}
		l.dump = d
	}
}

// forced reports whether a test override may have made the launcher build
// kernel name of family where the device (or profile) would not. It errs
// towards "forced": such builds are left out of the GPU register gate. A
// forced kernel the profile's own selection can also pick (attn_wg on a
// GPU, say, forced at a head size no other test reaches) counts as
// selected: its program is the same whatever shape forced it.
func (l *Lib) forced(family, name string) bool {
	gpu := l.info().Type == "GPU"
	switch family {
	case "matmul":
		// The GPU kernels of pick; gemm marks their builds -DMM_GPU.
		return halfEmu || mmForce != "" && !(gpu && (name == "mm_reg" || name == "mm_tiled" || name == "mm_gemv_wg" || name == "mm_gemv_c4" || name == "mm_naive"))
	case "quant":
		return halfEmu || qForce != "" && !(gpu && (name == "qmv_wg" || name == "qmm_4x2" || name == "qmt_r1" || name == "qmt_mm"))
	case "attention":
		return halfEmu || l.attnEmu || attnForce != "" && !(gpu && (name == "attn_wg" || name == "attn_split" || name == "attn_combine" || name == "attn_qtile"))
	case "conv", "volume":
		// A strip width other than the device's (16 on CPUs, 4 on GPUs)
		// is only ever a test's.
		// conv_pw is a CPU route: only a test builds it on a GPU.
		return convKMajor && !gpu || convPXForce != 0 && convPXForce != l.convPXDevice() ||
			gpu && strings.HasPrefix(name, "conv_pw")
	case "resize":
		return resizeSeparable
	case "norm":
		return halfEmu || styleOverride == 1 && gpu || styleOverride == 2 && !gpu
	case "move", "reduce", "softmax", "rotary":
		return styleOverride == 1 && gpu || styleOverride == 2 && !gpu
	}
	return false
}
