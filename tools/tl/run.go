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
	"time"

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

func runRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var inputs multiFlag
	fs.Var(&inputs, "input", "an input as name=file.npy (repeat for each input)")
	out := fs.String("out", "", "directory to write outputs to as <name>.npy (default: print a summary only)")
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl run model.onnx --input name=file.npy ... [--out dir] [--device d] [--precision fp32|fp16] [--max seq=N] [--profile]")
		fs.PrintDefaults()
	}
	valued := map[string]bool{"input": true, "out": true}
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
		t, err := npy.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--input %s: %w", name, err)
		}
		feeds[name] = t
	}
	t0 := time.Now()
	s, err := engine.Open(pos[0], opts)
	if err != nil {
		return err
	}
	defer s.Close()
	openTime := time.Since(t0)
	t1 := time.Now()
	res, err := s.Run(feeds)
	if err != nil {
		return err
	}
	runTime := time.Since(t1)
	fmt.Fprintf(stdout, "opened in %v, ran in %v\n", openTime.Round(time.Millisecond), runTime.Round(time.Microsecond))
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	t := newTable("output", "type", "shape", "min", "max", "mean", "first values").alignRight(3, 4, 5)
	for _, n := range names {
		v := res[n]
		mn, mx, mean, first := summarize(v)
		t.add(n, v.Dtype().String(), fmt.Sprint([]int(v.Shape())), mn, mx, mean, first)
		if *out != "" {
			if err := os.MkdirAll(*out, 0o755); err != nil {
				return err
			}
			file := filepath.Join(*out, sanitize(n)+".npy")
			if err := npy.WriteFile(file, v); err != nil {
				return err
			}
		}
	}
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

// printMemory prints the activation plan at the run's symbol values.
func printMemory(s *engine.Session, feeds map[string]*tensor.Dense) {
	if p := s.Plan(); p != nil {
		b := bindingOf(s, feeds)
		fmt.Fprintf(stdout, "\nactivation memory: %s allocated for the declared maxima %v\n", memplan.Bytes(p.Allocated()), s.Maxima())
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

// summarize returns min, max, mean and the first few values as text.
func summarize(t *tensor.Dense) (string, string, string, string) {
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
	default:
		return "", "", "", fmt.Sprint(t.Data())
	}
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
		return writeJSON(stdout, list)
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
