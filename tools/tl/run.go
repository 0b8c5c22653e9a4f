package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/opencl"
	"github.com/tlite/tlite/symshape"
)

var stdout io.Writer = os.Stdout

func init() {
	register(command{"run", "run a model on .npy inputs and write its outputs as .npy", runRun})
	register(command{"devices", "list the OpenCL devices tlite can use", runDevices})
}

// runResult is what run prints; --json writes it as is.
type runResult struct {
	Model     string       `json:"model"`
	Device    deviceJSON   `json:"device"`
	Precision string       `json:"precision"`
	Inputs    []tensorInfo `json:"inputs"`
	Outputs   []tensorInfo `json:"outputs"`
	Startup   startup      `json:"startup"`
	RunMs     float64      `json:"run_ms"`
	OutDir    string       `json:"out_dir,omitempty"`
	Made      []string     `json:"inputs_made_empty,omitempty"`
	Plan      planJSON     `json:"plan"`
}

// planJSON is the memory plan's size and the symbol maxima it is sized for.
type planJSON struct {
	Bytes  int64                  `json:"bytes"`
	Maxima map[string]maximumJSON `json:"maxima"`
}

// maximumJSON is a symbol's maximum and where it came from: "--max", "the
// inputs given", "default" or "derived" (then node and why say from what).
type maximumJSON struct {
	Value int64  `json:"value"`
	From  string `json:"from"`
	Node  string `json:"node,omitempty"`
	Why   string `json:"why,omitempty"`
}

func planOf(s *engine.Session) planJSON {
	pj := planJSON{Maxima: map[string]maximumJSON{}}
	if p := s.Plan(); p != nil {
		pj.Bytes = p.Allocated()
	}
	for k, m := range s.MaximaFrom() {
		mj := maximumJSON{Value: m.Value, From: m.From}
		switch m.From {
		case engine.FromDeclared:
			mj.From = "--max"
		case engine.FromInputs:
			mj.From = "the input shapes"
		case engine.FromLimit:
			mj.From, mj.Node, mj.Why = "derived", m.Limit.Node, m.Limit.Why
		}
		pj.Maxima[k] = mj
	}
	return pj
}

// tensorInfo summarises one tensor; Min/Max/Mean are null for empty ones.
type tensorInfo struct {
	Name  string    `json:"name"`
	Type  string    `json:"type"`
	Shape []int     `json:"shape"`
	Min   *float64  `json:"min,omitempty"`
	Max   *float64  `json:"max,omitempty"`
	Mean  *float64  `json:"mean,omitempty"`
	First []float64 `json:"first,omitempty"`
	File  string    `json:"file,omitempty"`
}

func runRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var inputs multiFlag
	fs.Var(&inputs, "input", "an input as name=file.npy (repeat for each input)")
	inputsFrom := fs.String("inputs", "", "a folder of <name>.npy files, or a JSON file {\"name\": {\"dims\": [...], \"type\": \"float32\", \"data\": [...]}}")
	out := fs.String("out", "", "directory to write outputs to as <name>.npy (default: print a summary only)")
	asJSON := fs.Bool("json", false, "write the timings and the outputs' summary as JSON")
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl run model.onnx [--input name=file.npy ...] [--inputs DIR|file.json] [--out dir] [--json] [--device d] [--precision fp32|fp16] [--max seq=N] [--profile]")
		fmt.Fprintln(fs.Output(), "Past key/value inputs left out are given as empty tensors (a decoder's first step).")
		fs.PrintDefaults()
	}
	valued := map[string]bool{"input": true, "inputs": true, "out": true}
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
	opts, err := sf.options()
	if err != nil {
		return err
	}
	feeds := map[string]*tensor.Dense{}
	for _, in := range inputs {
		name, file, ok := strings.Cut(in, "=")
		if !ok {
			return fmt.Errorf("--input %q: want name=file.npy", in)
		}
		if _, dup := feeds[name]; dup {
			return fmt.Errorf("--input %s is given twice: give each input once", name)
		}
		t, err := npy.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--input %s: %w", name, err)
		}
		feeds[name] = t
	}
	// The plan is sized for the inputs given: symbols without a --max
	// take their maximum from them, not from the engine's defaults.
	var made []string
	opts.InputShapes = func(ports []engine.Port) (map[string][]int, error) {
		if *inputsFrom != "" {
			var more map[string]*tensor.Dense
			if fi, err := os.Stat(*inputsFrom); err != nil {
				return nil, fmt.Errorf("--inputs: %w", err)
			} else if fi.IsDir() {
				more, err = readInputsDir(*inputsFrom, ports)
				if err != nil {
					return nil, fmt.Errorf("--inputs: %w", err)
				}
			} else if more, err = readInputsJSON(*inputsFrom); err != nil {
				return nil, fmt.Errorf("--inputs: %w", err)
			}
			for name, t := range more {
				if _, dup := feeds[name]; dup {
					return nil, fmt.Errorf("input %s is given both by --input and by --inputs %s: give it once", name, *inputsFrom)
				}
				feeds[name] = t
			}
		}
		made = fillEmptyPast(ports, feeds)
		shapes := map[string][]int{}
		for name, t := range feeds {
			shapes[name] = shapeOf(t)
		}
		return shapes, nil
	}
	userMax, _ := parseBinding(*sf.max)
	s, loadMs, err := openSession(pos[0], opts, userMax)
	if err != nil {
		return err
	}
	defer s.Close()
	var res map[string]*tensor.Dense
	runMs, built, cached, err := firstUse(s, func() error {
		var err error
		res, err = s.Run(feeds)
		return err
	})
	if err != nil {
		return err
	}
	rr := runResult{Model: pos[0], Device: deviceOf(s), Precision: opts.Precision.String(), Made: made,
		Startup: startupOf(s, loadMs, runMs, 0, built, cached), RunMs: runMs, Inputs: []tensorInfo{}, Outputs: []tensorInfo{}, Plan: planOf(s)}
	for _, p := range s.Inputs() {
		if t, ok := feeds[p.Name]; ok {
			rr.Inputs = append(rr.Inputs, tensorInfo{Name: p.Name, Type: t.Dtype().String(), Shape: shapeOf(t)})
		}
	}
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	files := uniqueFileNames(names)
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		rr.OutDir = *out
	}
	t := newTable("output", "type", "shape", "min", "max", "mean", "first values").alignRight(3, 4, 5)
	for _, n := range names {
		v := res[n]
		info := summarizeInfo(n, v)
		mn, mx, mean, first := summarize(v)
		t.add(n, v.Dtype().String(), fmt.Sprint(info.Shape), mn, mx, mean, first)
		if *out != "" {
			info.File = filepath.Join(*out, files[n])
			if err := npy.WriteFile(info.File, v); err != nil {
				return err
			}
		}
		rr.Outputs = append(rr.Outputs, info)
	}
	if *asJSON {
		return writeJSON(stdout, rr)
	}
	if len(made) > 0 {
		fmt.Fprintf(stdout, "empty past inputs made: %s\n", strings.Join(made, ", "))
	}
	fmt.Fprintf(stdout, "on %s: %s\n", s.Device(), rr.Startup.line())
	t.write(stdout)
	if *out != "" {
		fmt.Fprintf(stdout, "outputs written to %s\n", *out)
	}
	if opts.Profile {
		rows, err := s.Profile()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		printProfile(rows, 1)
		printMemory(s, feeds)
	}
	return nil
}

// shapeOf is a tensor's shape as a JSON array ([] for a scalar).
func shapeOf(t *tensor.Dense) []int {
	if t.Shape().IsScalar() {
		return []int{}
	}
	return append([]int{}, t.Shape()...)
}

// uniqueFileNames maps output names to distinct file names: sanitised
// names that collide ("a/b" and "a_b") get a numeric suffix, so no output
// overwrites another.
func uniqueFileNames(names []string) map[string]string {
	out := map[string]string{}
	used := map[string]bool{}
	for _, n := range names { // names are sorted: the same outputs get the same files each run
		base := sanitize(n)
		f := base + ".npy"
		for i := 2; used[strings.ToLower(f)]; i++ {
			f = fmt.Sprintf("%s_%d.npy", base, i)
		}
		used[strings.ToLower(f)] = true
		out[n] = f
	}
	return out
}

// summarizeInfo is summarize for --json.
func summarizeInfo(name string, t *tensor.Dense) tensorInfo {
	info := tensorInfo{Name: name, Type: t.Dtype().String(), Shape: shapeOf(t)}
	xs := floatsOf(t)
	if len(xs) == 0 {
		return info
	}
	mn, mx, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range xs {
		mn, mx, sum = math.Min(mn, x), math.Max(mx, x), sum+x
	}
	mean := sum / float64(len(xs))
	for _, p := range []*float64{&mn, &mx, &mean} {
		if math.IsNaN(*p) || math.IsInf(*p, 0) {
			*p = 0 // JSON has no NaN; the table shows them
		}
	}
	info.Min, info.Max, info.Mean = &mn, &mx, &mean
	for i := 0; i < len(xs) && i < 4; i++ {
		if !math.IsNaN(xs[i]) && !math.IsInf(xs[i], 0) {
			info.First = append(info.First, xs[i])
		}
	}
	return info
}

// printMemory prints the activation plan at the run's symbol values.
func printMemory(s *engine.Session, feeds map[string]*tensor.Dense) {
	if p := s.Plan(); p != nil {
		b := bindingOf(s, feeds)
		fmt.Fprintf(stdout, "\nactivation memory: %s allocated for the maxima %s\n", memplan.Bytes(p.Allocated()), maximaLine(s))
		if peak, err := p.Peak(b); err == nil {
			un, _ := p.Unshared(b)
			fmt.Fprintf(stdout, "at this run (%v): %s used by the plan, %s without reuse\n", b, memplan.Bytes(peak), memplan.Bytes(un))
		}
	}
}

// bindingOf reads the symbol values off the input shapes: enough for reports.
func bindingOf(s *engine.Session, feeds map[string]*tensor.Dense) symshape.Binding {
	b := symshape.Binding{}
	for _, p := range s.Inputs() {
		t, ok := feeds[p.Name]
		if !ok {
			continue
		}
		for i, d := range p.Shape {
			if name, bare := d.SymName(); bare && i < len(t.Shape()) {
				b[name] = int64(t.Shape()[i])
			}
		}
	}
	return b
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == '\\' {
			return '_'
		}
		return r
	}, name)
}

// floatsOf reads a tensor's elements as float64 (nil for an empty tensor
// or an unsupported type).
func floatsOf(t *tensor.Dense) []float64 {
	if t.Shape().TotalSize() == 0 && !t.Shape().IsScalar() {
		return nil
	}
	var xs []float64
	switch d := t.Data().(type) {
	case []float32:
		for _, v := range d {
			xs = append(xs, float64(v))
		}
	case []float64:
		xs = d
	case []int64:
		for _, v := range d {
			xs = append(xs, float64(v))
		}
	case []int32:
		for _, v := range d {
			xs = append(xs, float64(v))
		}
	case []bool:
		for _, v := range d {
			if v {
				xs = append(xs, 1)
			} else {
				xs = append(xs, 0)
			}
		}
	case float32:
		xs = []float64{float64(d)}
	case float64:
		xs = []float64{d}
	case int64:
		xs = []float64{float64(d)}
	case int32:
		xs = []float64{float64(d)}
	}
	return xs
}

// summarize returns min, max, mean and the first few values as text.
func summarize(t *tensor.Dense) (string, string, string, string) {
	xs := floatsOf(t)
	if len(xs) == 0 {
		return "", "", "", "(empty)"
	}
	mn, mx, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, x := range xs {
		mn, mx, sum = math.Min(mn, x), math.Max(mx, x), sum+x
	}
	var first []string
	for i := 0; i < len(xs) && i < 4; i++ {
		first = append(first, fmt.Sprintf("%.4g", xs[i]))
	}
	if len(xs) > 4 {
		first = append(first, "…")
	}
	return fmt.Sprintf("%.4g", mn), fmt.Sprintf("%.4g", mx), fmt.Sprintf("%.4g", sum/float64(len(xs))), strings.Join(first, " ")
}

func runDevices(args []string) error {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write the list as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	list, err := opencl.List()
	if err != nil {
		return err
	}
	if *asJSON {
		out := []deviceListJSON{}
		for _, d := range list {
			out = append(out, deviceListJSON{Index: d.Index, Type: d.Type, Name: d.Name, Platform: d.Platform, Vendor: d.Vendor,
				Version: d.Version, Driver: d.Driver, ComputeUnits: d.ComputeUnits, GlobalMem: d.GlobalMem, MaxAlloc: d.MaxAlloc,
				FP16: d.FP16, Unified: d.Unified, PriorityExt: d.PriorityExt})
		}
		return writeJSON(stdout, out)
	}
	t := newTable("index", "type", "name", "platform", "version", "CUs", "max alloc", "fp16", "priority hints")
	for _, d := range list {
		t.add(d.Index, d.Type, d.Name, d.Platform, d.Version, d.ComputeUnits, memplan.Bytes(d.MaxAlloc), d.FP16, orNone(d.PriorityExt))
	}
	t.write(stdout)
	fmt.Fprintln(stdout, `also: --device go (the pure-Go CPU backend, no OpenCL needed)`)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// deviceListJSON is one device of devices --json, in snake_case like every
// other --json output.
type deviceListJSON struct {
	Index        string `json:"index"`
	Type         string `json:"type"`
	Name         string `json:"name"`
	Platform     string `json:"platform"`
	Vendor       string `json:"vendor"`
	Version      string `json:"version"`
	Driver       string `json:"driver"`
	ComputeUnits int    `json:"compute_units"`
	GlobalMem    int64  `json:"global_mem_bytes"`
	MaxAlloc     int64  `json:"max_alloc_bytes"`
	FP16         bool   `json:"fp16"`
	Unified      bool   `json:"unified_memory"`
	PriorityExt  string `json:"priority_hints"`
}
