package main

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// sessionFlags are the flags every command that opens a session shares.
type sessionFlags struct {
	device     *string
	precision  *string
	attnPrec   *string
	max        *string
	profile    *bool
	priority   *string
	flushEvery *int
}

func addSessionFlags(fs *flag.FlagSet) *sessionFlags {
	return &sessionFlags{
		device:     fs.String("device", "", `backend: "" (OpenCL, GPU first), "go" (pure-Go CPU), or an OpenCL device ("cpu", "gpu", "0:1", part of a name); env TLITE_DEVICE`),
		precision:  fs.String("precision", "fp32", "activation storage: fp32 or fp16"),
		attnPrec:   fs.String("attn-precision", "auto", "arithmetic of the GPU attention kernels: auto (fp16 where the device has cl_khr_fp16 and --precision is fp16), fp32, or fp16 (an error where the device cannot)"),
		max:        fs.String("max", "", "declared symbol maxima that size the memory plan, e.g. seq=2048,past=4096"),
		profile:    fs.Bool("profile", false, "print a per-op table from device profiling"),
		priority:   fs.String("priority", "normal", `OpenCL queue priority: low (yield to the UI; on Qualcomm also the HIGH perf hint), normal or high; applied where the device has a priority extension`),
		flushEvery: fs.Int("flush-every", 0, "submit queued kernels every N launches while a step is enqueued (0 = 64, negative = only at the end)"),
	}
}

// parsePriority reads --priority.
func parsePriority(s string) (opencl.Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "low":
		return opencl.PriorityLow, nil
	case "normal", "default", "":
		return opencl.PriorityDefault, nil
	case "high":
		return opencl.PriorityHigh, nil
	}
	return opencl.PriorityDefault, fmt.Errorf("--priority %q: want low, normal or high", s)
}

// sessionValued lists the session flags that take a value, for splitArgs.
var sessionValued = map[string]bool{"device": true, "precision": true, "attn-precision": true, "max": true, "priority": true, "flush-every": true}

func (f *sessionFlags) options() (engine.Options, error) {
	dev := *f.device
	if dev == "" {
		dev = os.Getenv("TLITE_DEVICE") // "go" must reach the engine, which only OpenCL reads it for
	}
	opts := engine.Options{Device: dev, Profile: *f.profile, FlushEvery: *f.flushEvery}
	pr, err := parsePriority(*f.priority)
	if err != nil {
		return opts, err
	}
	opts.Priority = pr
	switch strings.ToLower(*f.precision) {
	case "fp32", "f32":
		opts.Precision = engine.FP32
	case "fp16", "f16":
		opts.Precision = engine.FP16
	default:
		return opts, fmt.Errorf("--precision %q: want fp32 or fp16", *f.precision)
	}
	ap, err := kernels.ParseAttnPrecision(*f.attnPrec)
	if err != nil {
		return opts, fmt.Errorf("--attn-precision: %w", err)
	}
	opts.AttentionPrecision = ap
	max, err := parseBinding(*f.max)
	if err != nil {
		return opts, fmt.Errorf("--max: %w", err)
	}
	if len(max) > 0 {
		opts.Max = max
	}
	return opts, nil
}

// multiFlag collects a repeated flag (--input a=x.npy --input b=y.npy).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// printProfile prints the profile aggregated by op type and kernel, with each
// row's share of the total device time.
func printProfile(rows []engine.OpTime, runs int) {
	type key struct{ op, kernel string }
	agg := map[key]*engine.OpTime{}
	var total float64
	for _, r := range rows {
		k := key{r.OpType, r.Kernel}
		a := agg[k]
		if a == nil {
			a = &engine.OpTime{OpType: r.OpType, Kernel: r.Kernel}
			agg[k] = a
		}
		a.Calls += r.Calls
		a.Ms += r.Ms
		total += r.Ms
	}
	list := make([]*engine.OpTime, 0, len(agg))
	for _, a := range agg {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Ms > list[j].Ms })
	if runs < 1 {
		runs = 1
	}
	t := newTable("op", "kernel", "calls/run", "ms/run", "share").alignRight(2, 3, 4)
	for _, a := range list {
		share := 0.0
		if total > 0 {
			share = 100 * a.Ms / total
		}
		t.add(a.OpType, a.Kernel, fmt.Sprintf("%.0f", float64(a.Calls)/float64(runs)),
			fmt.Sprintf("%.3f", a.Ms/float64(runs)), fmt.Sprintf("%.1f%%", share))
	}
	t.add("total", "", "", fmt.Sprintf("%.3f", total/float64(runs)), "100%")
	t.write(stdout)
}

// parseShape reads "1x3x224x224" (an empty dim list, "", is a scalar).
func parseShape(s string) ([]int, error) {
	if s == "" || s == "scalar" {
		return []int{}, nil
	}
	var out []int
	for _, p := range strings.Split(s, "x") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad shape %q: want dims joined by x, e.g. 1x3x224x224", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// syntheticInput makes a benchmark input: floats uniform in [-1, 1); integer
// inputs named like masks are ones, position ids count up, other integers are
// small ids.
func syntheticInput(p engine.Port, shape []int, seed int64) (*tensor.Dense, error) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	r := rand.New(rand.NewSource(seed))
	name := strings.ToLower(p.Name)
	var backing any
	switch p.Type {
	case "float32", "float16":
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		backing = v
	case "int64":
		v := make([]int64, n)
		last := 1
		if len(shape) > 0 {
			last = shape[len(shape)-1]
		}
		for i := range v {
			switch {
			case strings.Contains(name, "mask"):
				v[i] = 1
			case strings.Contains(name, "position"):
				v[i] = int64(i % max(last, 1))
			case strings.Contains(name, "type"):
				// Segment ids (BERT's token_type_ids) index a 2-row table.
				v[i] = 0
			default:
				v[i] = r.Int63n(100)
			}
		}
		backing = v
	case "int32":
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(r.Intn(100))
		}
		backing = v
	case "bool":
		v := make([]bool, n)
		for i := range v {
			v[i] = true
		}
		backing = v
	default:
		return nil, fmt.Errorf("input %q: no synthetic data for type %s", p.Name, p.Type)
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing)), nil
}

// maximaLine prints the plan's symbol maxima with where each came from:
// "batch=1 (inputs), past=256 (limit: node /wpe/Gather), seq=7 (inputs)".
func maximaLine(s *engine.Session) string {
	mf := s.MaximaFrom()
	names := make([]string, 0, len(mf))
	for k := range mf {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	pj := planOf(s)
	for i, k := range names {
		m := pj.Maxima[k]
		from := m.From
		if m.Node != "" {
			from += ": node " + m.Node
		}
		parts[i] = fmt.Sprintf("%s=%d (%s)", k, m.Value, from)
	}
	if len(parts) == 0 {
		return "none (all shapes fixed)"
	}
	return strings.Join(parts, ", ")
}
