package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

func init() {
	register(command{"inspect", "print a model's symbolic shapes, ops, shape folding and weights", runInspect})
}

// inspectReport is what inspect prints; --json writes it as is.
type inspectReport struct {
	Path        string            `json:"path"`
	Producer    string            `json:"producer"`
	Opsets      map[string]int64  `json:"opsets"`
	Inputs      []portInfo        `json:"inputs"`
	Outputs     []portInfo        `json:"outputs"`
	Symbols     []string          `json:"symbols"`
	Equalities  []string          `json:"equalities,omitempty"`
	Fresh       []string          `json:"fresh_symbols,omitempty"`
	Assumptions []string          `json:"assumptions,omitempty"`
	Limits      []string          `json:"limits,omitempty"`
	Pins        []string          `json:"pinned,omitempty"`
	Nodes       int               `json:"nodes"`
	Classes     map[string]int    `json:"classes"`
	Ops         []opInfo          `json:"ops"`
	Remaining   []string          `json:"shape_ops_at_run_time"`
	Weights     []weightInfo      `json:"weights"`
	At          map[string]int64  `json:"evaluated_at"`
	Largest     []activationInfo  `json:"largest_activations"`
	SymbolNames map[string]string `json:"symbol_names,omitempty"`
}

// portInfo is an input or output. Shapes are arrays whose elements are
// numbers for fixed dims and strings for symbolic ones ("batch",
// "past + seq"); a shape not derived is null.
type portInfo struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Shape    []any  `json:"shape"`
	Declared []any  `json:"declared,omitempty"`
	shape    string // as printed
	declared string
}

type opInfo struct {
	Op      string         `json:"op"`
	Count   int            `json:"count"`
	Classes map[string]int `json:"classes"`
}

type weightInfo struct {
	Type     string `json:"type"`
	Count    int    `json:"count"`
	Bytes    int64  `json:"bytes"`
	External int64  `json:"external_bytes"`
}

type activationInfo struct {
	Value string `json:"value"`
	Node  string `json:"node"`
	Shape []any  `json:"shape"`
	shape string
	Bytes string `json:"bytes_expr"`
	At    int64  `json:"bytes_at"`
}

func runInspect(args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write the report as JSON")
	at := fs.String("at", "", "symbol values for sizing activations, e.g. seq=128,past=512 (unlisted symbols: 1 for batch, else 128)")
	top := fs.Int("top", 8, "how many of the largest activations to list")
	maxFlag := fs.String("max", "", "declared maxima, e.g. seq=128,past=1024: clamps such as min(seq, 128) then simplify")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl inspect model.onnx [--json] [--max seq=128,past=1024] [--at seq=128,past=512] [--top 8]")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, map[string]bool{"at": true, "top": true, "max": true})
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("want one model path, got %d arguments", len(pos))
	}
	if *top < 0 {
		return fmt.Errorf("--top %d: want a count of at least 0", *top)
	}
	if err := checkModel(pos[0], nil); err != nil {
		return err
	}
	m, err := graph.Load(pos[0])
	if err != nil {
		return err
	}
	defer m.Close()
	maxima, err := parseBinding(*maxFlag)
	if err != nil {
		return err
	}
	bounds := symshape.Bounds{}
	for s, v := range maxima {
		bounds[s] = [2]int64{0, v}
	}
	res, err := infer.Run(m, infer.Options{Bounds: bounds})
	if err != nil {
		return err
	}
	binding, err := parseBinding(*at)
	if err != nil {
		return err
	}
	rep := buildInspect(pos[0], m, res, binding, *top)
	if *asJSON {
		return writeJSON(os.Stdout, rep)
	}
	printInspect(os.Stdout, rep)
	return nil
}

// parseBinding reads "seq=128,past=512".
func parseBinding(s string) (map[string]int64, error) {
	out := map[string]int64{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("bad symbol value %q: want name=non-negative integer", kv)
		}
		out[strings.TrimSpace(k)] = n
	}
	return out, nil
}

// shapeArray is a symbolic shape for JSON: numbers and strings.
func shapeArray(s []symshape.Expr) []any {
	if s == nil {
		return nil
	}
	out := make([]any, len(s))
	for i, d := range s {
		if v, ok := d.Const(); ok {
			out[i] = v
		} else {
			out[i] = d.String()
		}
	}
	return out
}

// declaredArray is the file's declared shape for JSON ("?" for unknown).
func declaredArray(ds []graph.Dim) []any {
	if ds == nil {
		return nil
	}
	out := make([]any, len(ds))
	for i, d := range ds {
		switch {
		case d.Param != "":
			out[i] = d.Param
		case d.Value >= 0:
			out[i] = d.Value
		default:
			out[i] = "?"
		}
	}
	return out
}

func declaredString(ds []graph.Dim) string {
	if ds == nil {
		return "?"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		switch {
		case d.Param != "":
			parts[i] = d.Param
		case d.Value >= 0:
			parts[i] = strconv.FormatInt(d.Value, 10)
		default:
			parts[i] = "?"
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func buildInspect(path string, m *graph.Model, res *infer.Result, at map[string]int64, top int) *inspectReport {
	g := m.Graph
	rep := &inspectReport{Path: path, Producer: m.Producer, Opsets: m.Opsets, Symbols: res.Symbols,
		Nodes: len(g.Nodes), Classes: map[string]int{}, At: map[string]int64{}, SymbolNames: res.SymbolNames}
	port := func(v *graph.Value) portInfo {
		p := portInfo{Name: v.Name, Type: v.Type.String(), Shape: shapeArray(v.Shape), shape: symshape.FormatShape(v.Shape)}
		if d := declaredString(v.Declared); d != p.shape {
			p.declared, p.Declared = d, declaredArray(v.Declared)
		}
		return p
	}
	for _, v := range g.Inputs {
		rep.Inputs = append(rep.Inputs, port(v))
	}
	for _, v := range g.Outputs {
		rep.Outputs = append(rep.Outputs, port(v))
	}
	for _, e := range res.Equalities {
		rep.Equalities = append(rep.Equalities, e.String())
	}
	for _, f := range res.Fresh {
		rep.Fresh = append(rep.Fresh, fmt.Sprintf("%s: %s (%s)", f.Sym, f.Reason, f.Node))
	}
	for _, a := range res.Assumptions {
		if !a.Limited {
			// Assumptions that hold exactly while clamps do not bind are
			// reported as the limits they imply.
			rep.Assumptions = append(rep.Assumptions, a.String())
		}
	}
	for _, l := range res.Limits {
		rep.Limits = append(rep.Limits, l.String())
	}
	for _, p := range res.Pins {
		rep.Pins = append(rep.Pins, p.String())
	}
	for c, n := range res.Counts {
		rep.Classes[c.String()] = n
	}
	ops := map[string]*opInfo{}
	for _, n := range g.Nodes {
		key := n.OpType
		if n.Domain != "" && n.Domain != "ai.onnx" {
			key = n.Domain + "." + n.OpType
		}
		o := ops[key]
		if o == nil {
			o = &opInfo{Op: key, Classes: map[string]int{}}
			ops[key] = o
		}
		o.Count++
		o.Classes[res.Class[n].String()]++
	}
	for _, o := range ops {
		rep.Ops = append(rep.Ops, *o)
	}
	sort.Slice(rep.Ops, func(i, j int) bool {
		if rep.Ops[i].Count != rep.Ops[j].Count {
			return rep.Ops[i].Count > rep.Ops[j].Count
		}
		return rep.Ops[i].Op < rep.Ops[j].Op
	})
	for _, n := range res.Remaining() {
		rep.Remaining = append(rep.Remaining, fmt.Sprintf("%s (%s)", n.Name, n.OpType))
	}
	weights := map[string]*weightInfo{}
	for _, v := range g.Initializers {
		t := v.Const
		if t == nil {
			continue
		}
		w := weights[t.Type.String()]
		if w == nil {
			w = &weightInfo{Type: t.Type.String()}
			weights[t.Type.String()] = w
		}
		w.Count++
		w.Bytes += int64(len(t.Data))
		if t.External {
			w.External += int64(len(t.Data))
		}
	}
	for _, w := range weights {
		rep.Weights = append(rep.Weights, *w)
	}
	sort.Slice(rep.Weights, func(i, j int) bool { return rep.Weights[i].Bytes > rep.Weights[j].Bytes })

	// Size activations at a concrete binding to rank them; the symbolic size
	// is what is printed.
	for _, s := range res.Symbols {
		v, ok := at[s]
		if !ok {
			v = 128
			if strings.Contains(strings.ToLower(s), "batch") {
				v = 1
			}
		}
		rep.At[s] = v
	}
	var acts []activationInfo
	for _, n := range g.Nodes {
		if res.Class[n] != infer.Device {
			continue
		}
		for _, v := range n.Outputs {
			if v == nil || v.Shape == nil || v.Type.Size() == 0 {
				continue
			}
			bytes := symshape.Const(int64(v.Type.Size()))
			for _, d := range v.Shape {
				bytes = symshape.Mul(bytes, d)
			}
			val, err := bytes.Eval(rep.At)
			if err != nil {
				continue
			}
			acts = append(acts, activationInfo{Value: v.Name, Node: n.OpType, Shape: shapeArray(v.Shape), shape: symshape.FormatShape(v.Shape), Bytes: productString(v.Type.Size(), v.Shape), At: val})
		}
	}
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].At > acts[j].At })
	if len(acts) > top {
		acts = acts[:top]
	}
	rep.Largest = acts
	return rep
}

// productString prints a size as the product people read ("16*batch*seq*(past + seq)")
// rather than the expanded canonical polynomial the algebra keeps.
func productString(elem int, shape []symshape.Expr) string {
	c := int64(elem)
	var parts []string
	for _, d := range shape {
		if v, ok := d.Const(); ok {
			c *= v
			continue
		}
		s := d.String()
		if strings.ContainsAny(s, "+- ") {
			s = "(" + s + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(append([]string{strconv.FormatInt(c, 10)}, parts...), "*")
}

func printInspect(w io.Writer, r *inspectReport) {
	var opsets []string
	for d, v := range r.Opsets {
		if d == "" {
			d = "ai.onnx"
		}
		opsets = append(opsets, fmt.Sprintf("%s %d", d, v))
	}
	sort.Strings(opsets)
	fmt.Fprintf(w, "model     %s\nproducer  %s\nopsets    %s\nnodes     %d\n\n", r.Path, r.Producer, strings.Join(opsets, ", "), r.Nodes)

	io := newTable("", "name", "type", "shape", "declared")
	for _, p := range r.Inputs {
		io.add("input", p.Name, p.Type, p.shape, p.declared)
	}
	for _, p := range r.Outputs {
		io.add("output", p.Name, p.Type, p.shape, p.declared)
	}
	io.write(w)
	fmt.Fprintf(w, "\nsymbols   %s\n", strings.Join(r.Symbols, ", "))
	for _, e := range r.Equalities {
		fmt.Fprintf(w, "proved    %s\n", e)
	}
	for _, f := range r.Fresh {
		fmt.Fprintf(w, "fresh     %s\n", f)
	}
	for _, p := range r.Pins {
		fmt.Fprintf(w, "pinned    %s\n", p)
	}
	for _, a := range r.Assumptions {
		fmt.Fprintf(w, "assumed   %s\n", a)
	}
	for _, l := range r.Limits {
		fmt.Fprintf(w, "limit     %s\n", l)
	}

	shapeOps := r.Classes["Folded"] + r.Classes["ConstFold"] + r.Classes["HostRuntime"]
	fmt.Fprintf(w, "\n%d tensor ops (device), %d shape ops: %d folded into symbolic shapes, %d constant-folded at load, %d left to run at run time\n\n",
		r.Classes["Device"], shapeOps, r.Classes["Folded"], r.Classes["ConstFold"], r.Classes["HostRuntime"])
	ops := newTable("op", "count", "device", "folded", "const", "runtime").alignRight(1, 2, 3, 4, 5)
	for _, o := range r.Ops {
		ops.add(o.Op, o.Count, o.Classes["Device"], o.Classes["Folded"], o.Classes["ConstFold"], o.Classes["HostRuntime"])
	}
	ops.write(w)
	if len(r.Remaining) > 0 {
		fmt.Fprintf(w, "\nshape ops left to run at run time:\n  %s\n", strings.Join(r.Remaining, "\n  "))
	}

	fmt.Fprintln(w)
	wt := newTable("weights", "tensors", "bytes", "external").alignRight(1, 2, 3)
	var total int64
	for _, x := range r.Weights {
		wt.add(x.Type, x.Count, memplan.Bytes(x.Bytes), memplan.Bytes(x.External))
		total += x.Bytes
	}
	wt.add("total", "", memplan.Bytes(total), "")
	wt.write(w)

	var at []string
	for s, v := range r.At {
		at = append(at, fmt.Sprintf("%s=%d", s, v))
	}
	sort.Strings(at)
	fmt.Fprintf(w, "\nlargest activations (bytes as symbolic expressions; sized at %s):\n", strings.Join(at, " "))
	act := newTable("value", "op", "shape", "bytes", "at").alignRight(4)
	for _, a := range r.Largest {
		act.add(a.Value, a.Node, a.shape, a.Bytes, memplan.Bytes(a.At))
	}
	act.write(w)
}
