package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/memplan"
)

func init() {
	register(command{"quantize", "store a model's weight matrices as 4-bit E0M4/INT4 or fp16", runQuantize})
}

// stderr receives progress lines; tests replace it.
var stderr io.Writer = os.Stderr

// quantizeReport is what quantize prints; --json writes it as is.
type quantizeReport struct {
	Input       string           `json:"input"`
	Output      string           `json:"output"`
	DataFile    string           `json:"data_file,omitempty"`
	Format      string           `json:"format"`
	Group       int              `json:"group"`
	MinSize     int              `json:"min_size"`
	Weights     []qonnx.Weight   `json:"weights"`
	Skipped     []qonnx.Skipped  `json:"skipped"`
	Activations int              `json:"activation_products"`
	Embeddings  []string         `json:"embeddings_kept_float"`
	Params      int64            `json:"params"`
	Copied      []string         `json:"copied,omitempty"`
	BytesBefore int64            `json:"initializer_bytes_before"`
	BytesAfter  int64            `json:"initializer_bytes_after"`
	Report      *maeReport       `json:"mae_report,omitempty"`
	Seconds     float64          `json:"seconds"`
	Opsets      map[string]int64 `json:"opsets"`
}

// maeReport is quant.Report with its ratios and totals spelled out.
type maeReport struct {
	Group    int         `json:"group"`
	Matrices []maeRow    `json:"matrices"`
	Total    maeRowTotal `json:"total"`
}

type maeRow struct {
	Name    string   `json:"name"`
	K       int      `json:"k"`
	N       int      `json:"n"`
	MAEE0M4 float64  `json:"mae_e0m4"`
	MAEInt4 float64  `json:"mae_int4"`
	Ratio   *float64 `json:"ratio"` // null when INT4 is exact
}

type maeRowTotal struct {
	MAEE0M4 float64  `json:"mae_e0m4"`
	MAEInt4 float64  `json:"mae_int4"`
	Ratio   *float64 `json:"ratio"`
}

func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func toMAEReport(r *quant.Report) *maeReport {
	if r == nil {
		return nil
	}
	out := &maeReport{Group: r.Group, Matrices: []maeRow{}}
	for _, m := range r.Matrices {
		out.Matrices = append(out.Matrices, maeRow{Name: m.Name, K: m.K, N: m.N, MAEE0M4: m.MAEE0M4, MAEInt4: m.MAEInt4, Ratio: finite(m.Ratio())})
	}
	e, i, ratio := r.Totals()
	out.Total = maeRowTotal{MAEE0M4: e, MAEInt4: i, Ratio: finite(ratio)}
	return out
}

func runQuantize(args []string) error {
	fs := flag.NewFlagSet("quantize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "", "weight storage: e0m4, int4 (4-bit MatMul/Gemm weights as tlite.MatMulQ nodes) or fp16 (MatMul, Gemm and Conv weights as float16 initializers)")
	group := fs.Int("group", quant.DefaultGroup, "4-bit group size along K (a multiple of 32 dividing K)")
	minSize := fs.Int("min-size", qonnx.DefaultMinSize, "smallest K*N converted; smaller weights stay float32")
	report := fs.Bool("report", false, "print per weight matrix the mean absolute error of E0M4 and INT4 and their ratio")
	asJSON := fs.Bool("json", false, "write what was done (and the report) as JSON")
	threshold := fs.Int("external-threshold", 1024, "tensors of at least this many bytes go to the external data file")
	align := fs.Int("align", 4096, "alignment of each tensor in the external data file (64 suffices for the kernels; 4096 makes every tensor page-aligned)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl quantize in.onnx out.onnx --format e0m4|int4|fp16 [--group 128] [--min-size 4096] [--report] [--json]")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, map[string]bool{"format": true, "group": true, "min-size": true, "external-threshold": true, "align": true})
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return fmt.Errorf("want an input and an output model path, got %d arguments", len(pos))
	}
	if *format == "" {
		return fmt.Errorf("--format is required: e0m4, int4 or fp16")
	}
	f, err := quant.ParseFormat(*format)
	if err != nil {
		return fmt.Errorf("--format %q: want e0m4, int4 or fp16", *format)
	}
	if *threshold <= 0 {
		return fmt.Errorf("--external-threshold %d: must be positive (the packed weights are meant to be mapped from the data file)", *threshold)
	}
	if *align <= 0 || *align%64 != 0 {
		return fmt.Errorf("--align %d: must be a positive multiple of 64", *align)
	}
	in, out := pos[0], pos[1]
	t0 := time.Now()
	m, err := graph.Load(in)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkQuantizeOutput(in, out, m.ExternalFiles()); err != nil {
		return err
	}
	params := paramCount(m)
	if m.Metadata == nil {
		m.Metadata = map[string]string{}
	}
	if _, ok := m.Metadata[paramsKey]; !ok {
		// The packed weights no longer count their elements; the
		// original count travels with the model for bench to report.
		m.Metadata[paramsKey] = strconv.FormatInt(params, 10)
	}
	last := t0
	progress := func(done, total int, w qonnx.Weight) {
		// Small models finish before anyone wonders; big ones report
		// about once a second.
		if now := time.Now(); now.Sub(last) >= time.Second || (done == total && now.Sub(t0) >= time.Second) {
			last = now
			fmt.Fprintf(stderr, "tl quantize: %d/%d weights (%s [%d x %d]), %.1fs\n", done, total, w.Name, w.K, w.N, now.Sub(t0).Seconds())
		}
	}
	res, err := qonnx.Quantize(m, qonnx.Options{Format: f, Group: *group, MinSize: *minSize, Report: *report, Progress: progress})
	if err != nil {
		return err
	}
	if f == quant.FP16 {
		convs, err := convWeightsToHalf(m.Graph, *minSize)
		if err != nil {
			return err
		}
		for _, c := range convs {
			res.BytesAfter -= c.FloatBytes - c.StoredBytes
		}
		res.Weights = append(res.Weights, convs...)
	} else {
		// No 4-bit convolution kernel exists: say which weights stay.
		for _, n := range m.Graph.Nodes {
			if n.OpType == "Conv" && len(n.Inputs) > 1 && n.Inputs[1] != nil && n.Inputs[1].Const != nil && n.Inputs[1].Const.NumElements() >= int64(*minSize) {
				res.Skipped = append(res.Skipped, qonnx.Skipped{Node: n.Name, Weight: n.Inputs[1].Name,
					Reason: "Conv: tlite has no 4-bit convolution kernel; --format fp16 stores Conv weights half"})
			}
		}
	}
	if err := m.Graph.Validate(); err != nil {
		return fmt.Errorf("the rewritten graph is invalid (a bug): %w", err)
	}
	dataFile := filepath.Base(out) + ".data"
	inline, err := writeAtomically(m, out, graph.WriteOptions{ExternalThreshold: *threshold, DataFile: dataFile, Align: *align})
	if err != nil {
		return err
	}
	if inline {
		dataFile = "" // everything fitted inline
	}
	copied, err := copyBeside(in, out, "config.json", "tokenizer.json")
	if err != nil {
		return err
	}
	rep := quantizeReport{Input: in, Output: out, DataFile: dataFile, Format: f.String(), Group: res.Group, MinSize: res.MinSize,
		Weights: res.Weights, Skipped: res.Skipped, Activations: res.Activations, Embeddings: res.Embeddings,
		Params: params, Copied: copied, BytesBefore: res.BytesBefore, BytesAfter: res.BytesAfter, Report: toMAEReport(res.Report),
		Seconds: time.Since(t0).Seconds(), Opsets: m.Opsets}
	if rep.Weights == nil {
		rep.Weights = []qonnx.Weight{}
	}
	if rep.Skipped == nil {
		rep.Skipped = []qonnx.Skipped{}
	}
	if rep.Embeddings == nil {
		rep.Embeddings = []string{}
	}
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	printQuantize(stdout, rep, res)
	return nil
}

func printQuantize(w io.Writer, rep quantizeReport, res *qonnx.Result) {
	var fb, sb int64
	products := 0
	for _, x := range rep.Weights {
		fb += x.FloatBytes
		sb += x.StoredBytes
		products += len(x.Nodes)
	}
	how := rep.Format
	if rep.Format != quant.FP16.String() {
		how = fmt.Sprintf("%s, group %d", rep.Format, rep.Group)
	}
	fmt.Fprintf(w, "%s -> %s (%s, min size %d)\n", rep.Input, rep.Output, how, rep.MinSize)
	fmt.Fprintf(w, "parameters: %s (counted on the original weights)\n", humanCount(rep.Params))
	fmt.Fprintf(w, "converted %d weights read by %d products: %s -> %s\n", len(rep.Weights), products, memplan.Bytes(fb), memplan.Bytes(sb))
	fmt.Fprintf(w, "all initializers: %s -> %s\n", memplan.Bytes(rep.BytesBefore), memplan.Bytes(rep.BytesAfter))
	if len(rep.Weights) > 0 {
		t := newTable("product", "weight", "K", "N", "layout", "before", "after").alignRight(2, 3, 5, 6)
		for _, x := range rep.Weights {
			prod := x.Nodes[0]
			if len(x.Nodes) > 1 {
				prod += fmt.Sprintf(" (+%d more)", len(x.Nodes)-1)
			}
			t.add(prod, x.Name, x.K, x.N, x.Layout, memplan.Bytes(x.FloatBytes), memplan.Bytes(x.StoredBytes))
		}
		t.write(w)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "left float (%d weight products):\n", len(rep.Skipped))
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  %s (%s): %s\n", s.Node, s.Weight, s.Reason)
		}
	}
	if rep.Activations > 0 {
		fmt.Fprintf(w, "%d products of two activations (attention) are not weights and stay as they are\n", rep.Activations)
	}
	for _, e := range rep.Embeddings {
		fmt.Fprintf(w, "embedding table %s (read by Gather) stays float\n", e)
	}
	if res.Report != nil {
		fmt.Fprintln(w)
		res.Report.WriteTo(w)
	}
	for _, c := range rep.Copied {
		fmt.Fprintf(w, "copied %s beside the output\n", c)
	}
	if rep.DataFile != "" {
		fmt.Fprintf(w, "wrote %s and %s in %.1fs\n", rep.Output, rep.DataFile, rep.Seconds)
	} else {
		fmt.Fprintf(w, "wrote %s in %.1fs\n", rep.Output, rep.Seconds)
	}
}
