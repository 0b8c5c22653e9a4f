package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
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
	Device     string           `json:"device"`
	Precision  string           `json:"precision"`
	Shapes     map[string][]int `json:"shapes"`
	Runs       int              `json:"runs"`
	OpenMs     float64          `json:"open_ms"`
	FirstMs    float64          `json:"first_run_ms"`
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
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("want one model path, got %d arguments", len(pos))
	}
	if *runs < 1 {
		return fmt.Errorf("-r %d: want at least one run", *runs)
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	given := map[string][]int{}
	for _, s := range shapes {
		name, dims, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--shape %q: want name=1x3x224x224", s)
		}
		d, err := parseShape(dims)
		if err != nil {
			return fmt.Errorf("--shape %s: %w", name, err)
		}
		given[name] = d
	}
	t0 := time.Now()
	s, err := engine.Open(pos[0], opts)
	if err != nil {
		return err
	}
	defer s.Close()
	res := benchResult{Model: pos[0], Device: orDefault(opts.Device, "opencl"), Precision: opts.Precision.String(),
		Shapes: map[string][]int{}, Runs: *runs, OpenMs: ms(time.Since(t0))}
	feeds := map[string]*tensor.Dense{}
	for i, p := range s.Inputs() {
		shape, ok := given[p.Name]
		if !ok {
			for _, d := range p.Shape {
				v, isConst := d.Const()
				if !isConst {
					return fmt.Errorf("input %q has symbolic shape %s: give --shape %s=...", p.Name, symshape.FormatShape(p.Shape), p.Name)
				}
				shape = append(shape, int(v))
			}
		}
		t, err := syntheticInput(p, shape, int64(i+1))
		if err != nil {
			return err
		}
		feeds[p.Name] = t
		res.Shapes[p.Name] = shape
	}
	t1 := time.Now()
	if _, err := s.Run(feeds); err != nil {
		return err
	}
	res.FirstMs = ms(time.Since(t1))
	for i := 1; i < *warm; i++ {
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
	fmt.Fprintf(stdout, "model %s on %s (%s), %d runs after %d warm-up\n", res.Model, res.Device, res.Precision, res.Runs, *warm)
	t := newTable("open", "first run", "median", "min", "max", "activations", "peak RSS").alignRight(0, 1, 2, 3, 4, 5, 6)
	t.add(fmt.Sprintf("%.1f ms", res.OpenMs), fmt.Sprintf("%.2f ms", res.FirstMs), fmt.Sprintf("%.3f ms", res.MedianMs),
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

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// peakRSSMiB reads the process's peak resident set (VmHWM) where /proc has
// it, else the Go runtime's view.
func peakRSSMiB() float64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%f", &kb)
				return kb / 1024
			}
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.Sys) / (1 << 20)
}
