package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// maxOpset is the newest default-domain opset tl accepts: ONNX 1.18's.
// A newer number is either a future ONNX whose operators may have changed
// meaning, or a broken file; both deserve a word before anything runs.
const maxOpset = 23

// deviceJSON is how every --json output names the device.
type deviceJSON struct {
	Backend string `json:"backend"` // "opencl" or "go"
	Name    string `json:"name"`
	Index   string `json:"index,omitempty"`
	Type    string `json:"type"`
}

func deviceOf(s *engine.Session) deviceJSON {
	d := s.Device()
	return deviceJSON{Backend: d.Backend, Name: d.Name, Index: d.Index, Type: d.Type}
}

// startup is the time to a first result, split the way it is spent: load
// (parse, shape derivation, lowering, plan, weight upload) and the first
// run, which on OpenCL builds or loads from the cache every kernel program
// it launches. CompileMs is the first run's excess over a later identical
// run: the kernel builds and other first-use costs.
type startup struct {
	LoadMs         float64 `json:"load_ms"`
	FirstRunMs     float64 `json:"first_run_ms"`
	CompileMs      float64 `json:"compile_ms"`
	ProgramsBuilt  int64   `json:"programs_built"`
	ProgramsCached int64   `json:"programs_from_cache"`
	KernelCache    string  `json:"kernel_cache,omitempty"`
}

// kernelCacheDir is where the OpenCL layer keeps compiled programs when
// the session does not name a directory (opencl.Options.CacheDir "").
func kernelCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil || base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, "tlite", "kernels")
}

// checkModel refuses a missing file and a model tl cannot mean to run
// (an opset beyond maxOpset), and checks that every --max symbol names a
// dim of the model's inputs. It loads the file (a mapping, cheap) and closes it.
func checkModel(path string, userMax map[string]int64, extraSyms ...string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	m, err := graph.Load(path)
	if err != nil {
		return err
	}
	defer m.Close()
	if v := m.Opset(""); v > maxOpset {
		return fmt.Errorf("%s imports ONNX opset %d; tl knows opsets up to %d: re-export with opset_version=17 (torch.onnx.export(..., opset_version=17))", path, v, maxOpset)
	}
	if len(userMax) == 0 {
		return nil
	}
	syms := map[string]bool{}
	for _, s := range extraSyms {
		syms[s] = true
	}
	for _, v := range m.Graph.Inputs {
		for _, d := range v.Declared {
			if d.Param != "" {
				syms[d.Param] = true
			}
		}
	}
	var fresh map[string]bool
	for name := range userMax {
		if syms[name] {
			continue
		}
		if fresh == nil {
			// Sizes only known from data at run time (a Range to an
			// input's value, NonZero's count) are named by shape
			// inference; the plan's error names them for --max.
			fresh = map[string]bool{}
			if res, err := infer.Run(m, infer.Options{}); err == nil {
				for _, f := range res.Fresh {
					fresh[f.Sym] = true
				}
			}
		}
		if !fresh[name] {
			return fmt.Errorf("--max %s: the model has no input dim named %q (its symbols: %s)", name, name, joinSorted(syms))
		}
	}
	return nil
}

func joinSorted(set map[string]bool) string {
	if len(set) == 0 {
		return "none"
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// openSession checks the model, opens it and times the load. A missing
// OpenCL device gets the flag that avoids it.
func openSession(path string, opts engine.Options, userMax map[string]int64) (*engine.Session, float64, error) {
	if err := checkModel(path, userMax); err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	s, err := engine.Open(path, opts)
	if err != nil {
		return nil, 0, cliError(err)
	}
	return s, ms(time.Since(t0)), nil
}

// cliError rewrites engine errors that name Go API options into the flags
// a tl user has.
func cliError(err error) error {
	var nd *engine.NoDeviceError
	if errors.As(err, &nd) {
		return fmt.Errorf("no OpenCL device: %v; use --device go (the pure-Go CPU backend) or set TLITE_DEVICE=go", nd.Err)
	}
	return err
}

// firstUse runs f, the session's first run, telling the user after a second
// that kernels are being compiled (and where the binary cache is) instead of
// leaving a silent pause, and returns the wall time and the programs built
// and loaded from the cache meanwhile.
func firstUse(s *engine.Session, f func() error) (msTaken float64, built, cached int64, err error) {
	b0, c0 := s.BuildStats()
	var timer *time.Timer
	if s.Device().Backend == "opencl" {
		dev := s.Device().Name
		timer = time.AfterFunc(time.Second, func() {
			fmt.Fprintf(stderr, "tl: compiling OpenCL kernels for %s on first use (binary cache: %s); later runs reuse them...\n", dev, kernelCacheDir())
		})
	}
	t0 := time.Now()
	err = f()
	msTaken = ms(time.Since(t0))
	if timer != nil {
		timer.Stop()
	}
	b1, c1 := s.BuildStats()
	return msTaken, b1 - b0, c1 - c0, err
}

// startupOf fills a startup record; later is the time of a run after the
// first (0 if none was made).
func startupOf(s *engine.Session, loadMs, firstMs, laterMs float64, built, cached int64) startup {
	st := startup{LoadMs: loadMs, FirstRunMs: firstMs, ProgramsBuilt: built, ProgramsCached: cached}
	if laterMs > 0 && firstMs > laterMs {
		st.CompileMs = firstMs - laterMs
	}
	if s.Device().Backend == "opencl" {
		st.KernelCache = kernelCacheDir()
	}
	return st
}

// line prints the startup record for people.
func (st startup) line() string {
	s := fmt.Sprintf("load %.0f ms, first run %.1f ms", st.LoadMs, st.FirstRunMs)
	if st.KernelCache != "" {
		s += fmt.Sprintf(" (kernels: %d compiled, %d from the cache in %s", st.ProgramsBuilt, st.ProgramsCached, st.KernelCache)
		if st.CompileMs > 0 {
			s += fmt.Sprintf("; first-use cost %.1f ms", st.CompileMs)
		}
		s += ")"
	}
	return s
}
