package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/symshape"
)

func init() {
	register(command{"bench", "measure a model's latency on synthetic inputs", runBench})
}

// benchResult is what bench prints; --json writes it as is.
type benchResult struct {
	Model      string           `json:"model"`
	Device     deviceJSON       `json:"device"`
	Precision  string           `json:"precision"`
	Shapes     map[string][]int `json:"shapes"`
	Runs       int              `json:"runs"`
	Warmup     int              `json:"warmup"`
	Startup    startup          `json:"startup"`
	MedianMs   float64          `json:"median_ms"`
	MinMs      float64          `json:"min_ms"`
	MaxMs      float64          `json:"max_ms"`
	ActBytes   int64            `json:"activation_bytes_allocated"`
	PeakRSSMiB float64          `json:"peak_rss_mib"`
}

func runBench(args []string) error {
	if isLLMBench(args) {
		return runLLMBench(args) // --model: the language-model mode (llmbench.go)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var shapes multiFlag
	fs.Var(&shapes, "shape", "an input shape as name=1x3x224x224 (repeat; inputs with static shapes need none)")
	runs := fs.Int("r", 10, "timed runs")
	warm := fs.Int("w", 2, "warm-up runs")
	asJSON := fs.Bool("json", false, "write the result as JSON")
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl bench model.onnx --shape name=1x3x224x224 ... [-r 10] [-w 2] [--device d] [--precision fp32|fp16] [--profile] [--json]\n       tl bench --model llm.onnx -p 128,1024 -n 64 [-r 5] [--json]   (language models, llama-bench style)")
		fs.PrintDefaults()
	}
	valued := map[string]bool{"shape": true, "r": true, "w": true}
	for k := range sessionValued {
		valued[k] = true
	}
	flags, pos := splitArgs(args, valued)
	if err := fs.Parse(flags); err != nil {
		if strings.Contains(err.Error(), "not defined: -p") || strings.Contains(err.Error(), "not defined: -n") {
			return fmt.Errorf("%w: -p and -n belong to the language-model mode: give the model as --model (tl bench --model m.onnx -p 128 -n 64)", err)
		}
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("want one model path, got %d arguments", len(pos))
	}
	if *runs < 1 {
		return fmt.Errorf("-r %d: want at least one run", *runs)
	}
	if *warm < 0 {
		return fmt.Errorf("-w %d: want 0 or more warm-up runs", *warm)
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	given := map[string][]int{}
	for _, s := range shapes {
		name, dims, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--shape %q: want name=1x3x224x224 (an input) or name=N (a symbol such as batch)", s)
		}
		d, err := parseShape(dims)
		if err != nil {
			return fmt.Errorf("--shape %s: %w", name, err)
		}
		if _, dup := given[name]; dup {
			return fmt.Errorf("--shape %s is given twice", name)
		}
		given[name] = d
	}
	userMax, _ := parseBinding(*sf.max)
	// The plan is sized for the shapes benchmarked (--max and derived
	// limits take over where present), and the shapes are checked before
	// anything is allocated.
	var shapesOf map[string][]int
	opts.InputShapes = func(ports []engine.Port) (map[string][]int, error) {
		var err error
		shapesOf, err = benchShapes(ports, given, userMax)
		return shapesOf, err
	}
	s, loadMs, err := openSession(pos[0], opts, userMax)
	if err != nil {
		return err
	}
	defer s.Close()
	res := benchResult{Model: pos[0], Device: deviceOf(s), Precision: opts.Precision.String(),
		Shapes: map[string][]int{}, Runs: *runs, Warmup: *warm}
	feeds := map[string]*tensor.Dense{}
	for i, p := range s.Inputs() {
		t, err := syntheticInput(p, shapesOf[p.Name], int64(i+1))
		if err != nil {
			return err
		}
		feeds[p.Name] = t
		res.Shapes[p.Name] = shapesOf[p.Name]
	}
	firstMs, built, cached, err := firstUse(s, func() error { _, err := s.Run(feeds); return err })
	if err != nil {
		return err
	}
	t1 := time.Now()
	if _, err := s.Run(feeds); err != nil {
		return err
	}
	res.Startup = startupOf(s, loadMs, firstMs, ms(time.Since(t1)), built, cached)
	for i := 2; i < *warm; i++ {
		if _, err := s.Run(feeds); err != nil {
			return err
		}
	}
	if opts.Profile {
		s.Profile() // drop the warm-up's records
	}
	times := make([]float64, *runs)
	for i := range times {
		t := time.Now()
		if _, err := s.Run(feeds); err != nil {
			return err
		}
		times[i] = ms(time.Since(t))
	}
	sort.Float64s(times)
	res.MedianMs, res.MinMs, res.MaxMs = times[len(times)/2], times[0], times[len(times)-1]
	if p := s.Plan(); p != nil {
		res.ActBytes = p.Allocated()
	}
	res.PeakRSSMiB = peakRSSMiB()
	if *asJSON {
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "model %s on %s (%s), %d runs after %d warm-up (at least 2: the first and one to time it against)\n", res.Model, s.Device(), res.Precision, res.Runs, max(*warm, 2))
	fmt.Fprintf(stdout, "startup: %s\n", res.Startup.line())
	fmt.Fprintf(stdout, "plan sized for: %s\n", maximaLine(s))
	t := newTable("load", "first run", "median", "min", "max", "activations", "peak RSS").alignRight(0, 1, 2, 3, 4, 5, 6)
	t.add(fmt.Sprintf("%.1f ms", res.Startup.LoadMs), fmt.Sprintf("%.2f ms", res.Startup.FirstRunMs), fmt.Sprintf("%.3f ms", res.MedianMs),
		fmt.Sprintf("%.3f ms", res.MinMs), fmt.Sprintf("%.3f ms", res.MaxMs), memplan.Bytes(res.ActBytes), fmt.Sprintf("%.0f MiB", res.PeakRSSMiB))
	t.write(stdout)
	if opts.Profile {
		rows, err := s.Profile()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		printProfile(rows, *runs)
	}
	return nil
}

// benchShapes decides every input's shape from --shape: an input's full
// shape (name=1x3x224x224), or a symbol's value (batch=1) that shapes
// every input using it; batch symbols default to 1. Every dim is checked
// against the model's constants and the plan's maxima before anything is
// allocated.
func benchShapes(ports []engine.Port, given map[string][]int, maxima map[string]int64) (map[string][]int, error) {
	inputs := map[string]bool{}
	syms := map[string]bool{}
	for _, p := range ports {
		inputs[p.Name] = true
		for _, d := range p.Shape {
			for _, sym := range d.Symbols() {
				syms[sym] = true
			}
		}
	}
	b := symshape.Binding{}
	for name, dims := range given {
		switch {
		case inputs[name]:
		case syms[name]:
			if len(dims) != 1 {
				return nil, fmt.Errorf("--shape %s: %s is a symbol: give one value (--shape %s=1)", name, name, name)
			}
			b[name] = int64(dims[0])
		default:
			var names []string
			for _, p := range ports {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("--shape %s: the model has no input or symbol of that name (inputs: %s; symbols: %s)", name, strings.Join(names, ", "), joinSorted(syms))
		}
	}
	// Bare symbols of the given input shapes bind too.
	for _, p := range ports {
		dims, ok := given[p.Name]
		if !ok {
			continue
		}
		if len(dims) != len(p.Shape) {
			return nil, fmt.Errorf("--shape %s=%s: the input has rank %d, shape %s", p.Name, dimsString(dims), len(p.Shape), symshape.FormatShape(p.Shape))
		}
		for i, d := range p.Shape {
			if sym, bare := d.SymName(); bare {
				if v, seen := b[sym]; seen && v != int64(dims[i]) {
					return nil, fmt.Errorf("--shape %s=%s: dim %d is %s, already %d", p.Name, dimsString(dims), i, sym, v)
				}
				b[sym] = int64(dims[i])
			}
		}
	}
	for sym := range syms {
		if _, ok := b[sym]; !ok && strings.Contains(strings.ToLower(sym), "batch") {
			b[sym] = 1
		}
	}
	for sym, v := range b {
		if mx, ok := maxima[sym]; ok && v > mx {
			return nil, fmt.Errorf("%s=%d is more than the plan's maximum %d: give --max %s=%d", sym, v, mx, sym, v)
		}
	}
	out := map[string][]int{}
	for _, p := range ports {
		shape := make([]int, len(p.Shape))
		dims, isGiven := given[p.Name]
		for i, d := range p.Shape {
			v, err := d.Eval(b)
			if err != nil {
				missing := []string{}
				for _, sym := range d.Symbols() {
					if _, ok := b[sym]; !ok {
						missing = append(missing, sym)
					}
				}
				return nil, fmt.Errorf("input %q has shape %s: give --shape %s=N (a symbol) or --shape %s=... (the whole input)", p.Name, symshape.FormatShape(p.Shape), strings.Join(missing, "=N --shape "), p.Name)
			}
			if isGiven && int64(dims[i]) != v {
				return nil, fmt.Errorf("--shape %s=%s: dim %d must be %s = %d", p.Name, dimsString(dims), i, d, v)
			}
			if v < 0 || v > 1<<31 {
				return nil, fmt.Errorf("input %q: dim %d = %d is out of range", p.Name, i, v)
			}
			shape[i] = int(v)
		}
		out[p.Name] = shape
	}
	return out, nil
}

func dimsString(d []int) string {
	parts := make([]string, len(d))
	for i, x := range d {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, "x")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// procStatusMiB reads a kB field of /proc/self/status ("VmHWM", "VmRSS")
// in MiB; ok is false where /proc has no such field.
func procStatusMiB(key string) (mib float64, ok bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, found := strings.CutPrefix(line, key+":"); found {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb); err != nil {
				return 0, false
			}
			return kb / 1024, true
		}
	}
	return 0, false
}

// peakRSSMiB reads the process's peak resident set (VmHWM) where /proc has
// it, else the Go runtime's view.
func peakRSSMiB() float64 {
	if mib, ok := procStatusMiB("VmHWM"); ok {
		return mib
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys) / (1 << 20)
}
