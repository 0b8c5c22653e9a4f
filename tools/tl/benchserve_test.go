package main

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tlite/tlite/engine/llms"
	"github.com/tlite/tlite/engine/trace"
)

// TestBenchServeArgs: "tl bench serve" is routed to the LLMS comparison,
// which refuses bad command lines before loading anything; "tl bench"
// itself still reaches the ordinary benchmark.
func TestBenchServeArgs(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "serve"},
		{"bench", "serve", "--model", "m.onnx", "--pattern", "zigzag"},
		{"bench", "serve", "--model", "m.onnx", "--contexts", "2,x"},
		{"bench", "serve", "--model", "m.onnx", "--contexts", ""},
		{"bench", "serve", "--model", "m.onnx", "--budget-contexts", "0"},
		{"bench", "serve", "--model", "m.onnx", "--limits-ms", "-3"},
		{"bench", "serve", "--model", "m.onnx", "--limits-ms", "0"},
		{"bench", "serve", "--model", "m.onnx", "--limits-rel", "-0.5"},
		{"bench", "serve", "--model", "m.onnx", "--limits-rel", "NaN"},
		{"bench", "serve", "--model", "m.onnx", "--limits-rel", "0,Inf"},
		{"bench", "serve", "--model", "m.onnx", "--chunk-sizes", "16,0"},
		{"bench", "serve", "--model", "m.onnx", "--rounds", "0"},
		{"bench", "serve", "--model", "m.onnx", "--anchor-rounds", "0"},
	} {
		if code := dispatch(args); code != 1 {
			t.Errorf("tl %v: exit %d, want 1", args, code)
		}
	}
	if code := dispatch([]string{"bench", "serve", "-h"}); code != 0 {
		t.Errorf("tl bench serve -h: exit %d", code)
	}
}

// TestBenchServeCurveAndHeld: a small end-to-end run on the default model
// (pure-Go device, 32-token cache) over two rounds at two chunk sizes
// gives every round's report, medians in "systems", the anchors, and one
// contexts-held row per relative limit at the anchors' own times.
func TestBenchServeCurveAndHeld(t *testing.T) {
	// A fixed planner cost model: a profile per size and round would cost
	// seconds each on the loaded pure-Go device.
	costs := t.TempDir()
	if err := saveCost(costs, llms.CostModel{ReA: 2e-3, ReB: 1e-3, IOC: 1e-9, IOE: 1e-4}); err != nil {
		t.Fatal(err)
	}
	out, _, err := capture(t, runBenchServe, "--cost-dir", costs, "--model", defaultModelDir+"/model.onnx", "--device", "go", "--ctx", "32",
		"--contexts", "2", "--calls", "2", "--systems", "llms", "--chunk-sizes", "8,16", "--rounds", "2",
		"--limits-rel", "0,1", "--limits-ms", "1000000", "--anchor-rounds", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res benchServeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(res.Rounds) != 2 {
		t.Fatalf("%d rounds reported", len(res.Rounds))
	}
	for _, sys := range []string{"llms", "llms@8"} {
		var v []float64
		for _, r := range res.Rounds {
			s, ok := r[sys][2]
			if !ok || s.Calls != 2 {
				t.Fatalf("round without %s at 2 contexts: %+v", sys, r)
			}
			v = append(v, s.SwitchMsMean)
		}
		if got := res.Systems[sys][2].SwitchMsMean; got != trace.Median(v) {
			t.Errorf("%s: systems has %v, rounds %v", sys, got, v)
		}
	}
	a := res.Anchors
	if a == nil || a.Tokens != 32 || a.Pool <= 0 || a.Swap <= 0 || a.SwapBytes == 0 {
		t.Fatalf("anchors %+v", a)
	}
	if len(res.Held) != 3 {
		t.Fatalf("held rows %+v", res.Held)
	}
	for k, want := range []time.Duration{a.Pool, a.Swap} {
		r := res.Held[k]
		if r.Rel == nil || *r.Rel != float64(k) || math.Abs(r.LimitMs-float64(want)/1e6) > 1e-9 || len(r.Held) != 2 {
			t.Errorf("held row %d: %+v; want rel %d at %v", k, r, k, want)
		}
	}
	// A limit no switch reaches: every system holds the one count
	// measured, as a lower bound.
	if r := res.Held[2]; r.Rel != nil || r.Held["llms"] != (trace.Held{Contexts: 2, AtLeast: true}) {
		t.Errorf("absolute row %+v", r)
	}
}

// TestBenchServeTables: the chunk-size curve prints the median over the
// rounds with the range, and the held table marks lower bounds.
func TestBenchServeTables(t *testing.T) {
	mk := func(lat ...time.Duration) *trace.Report {
		var rep trace.Report
		for i, sys := range []string{"llms@8", "llms"} {
			r := &trace.Result{System: sys, Contexts: 4}
			r.Records = append(r.Records, trace.Record{Switch: lat[i], Changed: true})
			rep.Add(r)
		}
		return &rep
	}
	if a, b := roundOrder([]int{4, 8, 16}, 0), roundOrder([]int{4, 8, 16}, 1); !slices.Equal(a, []int{4, 8, 16}) || !slices.Equal(b, []int{16, 8, 4}) {
		t.Errorf("round orders %v and %v", a, b)
	}
	ms := time.Millisecond
	reps := []*trace.Report{mk(3*ms, 1*ms), mk(5*ms, 2*ms), mk(4*ms, 9*ms)}
	var b bytes.Buffer
	writeChunkCurve(&b, reps, []llms.Mode{"llms"}, []int{4}, []int{8, 16})
	if !strings.Contains(b.String(), "4.00 [3.00–5.00]") || !strings.Contains(b.String(), "2.00 [1.00–9.00]") {
		t.Errorf("curve:\n%s", b.String())
	}
	med, err := trace.MedianReport(reps)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	rel := 0.5
	writeHeld(&b, []heldRow{{LimitMs: 3, Rel: &rel, Held: med.HeldUnder(3*ms, false)}, {LimitMs: 100, Held: med.HeldUnder(100*ms, false)}}, med)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || strings.Fields(lines[2])[2] != "≥4" || strings.Fields(lines[2])[3] != "0" ||
		strings.Fields(lines[3])[1] != "-" || strings.Fields(lines[3])[3] != "≥4" {
		t.Errorf("held table:\n%s", b.String())
	}
}
