package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// kvSeq is a test's bookkeeping for a session with an in-place cache:
// the position each slot holds (-1: empty). The tests drive the session's
// Run directly, so the rewritten model's interface is what they check;
// package engine/kv wraps the same bookkeeping as its API.
type kvSeq struct {
	t       testing.TB
	s       *Session
	slotPos []int
	pad     int
	vocab   int
	lastLen int // kv_len of the last step
}

func newKVSeq(t testing.TB, s *Session, pad int) *kvSeq {
	t.Helper()
	info, ok := s.KVInfo()
	if !ok {
		t.Fatal("the session has no in-place cache")
	}
	q := &kvSeq{t: t, s: s, slotPos: make([]int, info.MaxContext), pad: pad}
	q.reset()
	out := s.Outputs()[0]
	v, _ := out.Shape[len(out.Shape)-1].Const()
	q.vocab = int(v)
	return q
}

func (q *kvSeq) reset() {
	for i := range q.slotPos {
		q.slotPos[i] = -1
	}
}

// step writes tokens at positions into slots and returns their logits,
// [len(tokens)][vocab].
func (q *kvSeq) step(tokens, positions, slots []int) ([][]float32, error) {
	hi := 0
	for j, p := range q.slotPos {
		if p >= 0 {
			hi = j + 1
		}
	}
	for _, s := range slots {
		hi = max(hi, s+1)
	}
	kvLen := min((hi+q.pad-1)/q.pad*q.pad, len(q.slotPos))
	in := kvStepInputs(tokens, positions, slots, q.slotPos, kvLen)
	out, err := q.s.Run(in)
	if err != nil {
		return nil, err
	}
	for i, s := range slots {
		q.slotPos[s] = positions[i]
	}
	q.lastLen = kvLen
	return rows(q.t, out["logits"], len(tokens)), nil
}

// kvStepInputs builds the rewritten model's inputs for tokens written at
// slots, with slotPos the position each slot held before the step and kvLen
// the attended length: token t sees slot j when j holds a position <=
// positions[t], the tokens of this step included.
func kvStepInputs(tokens, positions, slots []int, slotPos []int, kvLen int) map[string]*tensor.Dense {
	n := len(tokens)
	sp := append([]int(nil), slotPos...)
	for i, s := range slots {
		sp[s] = positions[i]
	}
	ids, pos, sl := make([]int64, n), make([]int64, n), make([]int64, n)
	for i := range tokens {
		ids[i], pos[i], sl[i] = int64(tokens[i]), int64(positions[i]), int64(slots[i])
	}
	bias := make([]float32, n*kvLen)
	for t := 0; t < n; t++ {
		for j := 0; j < kvLen; j++ {
			if j >= len(sp) || sp[j] < 0 || sp[j] > positions[t] {
				bias[t*kvLen+j] = KVBiasMasked
			}
		}
	}
	return map[string]*tensor.Dense{
		"input_ids":      tensor.New(tensor.WithShape(1, n), tensor.WithBacking(ids)),
		KVPositionsInput: tensor.New(tensor.WithShape(1, n), tensor.WithBacking(pos)),
		KVSlotsInput:     tensor.New(tensor.WithShape(1, n), tensor.WithBacking(sl)),
		KVBiasInput:      tensor.New(tensor.WithShape(1, 1, n, kvLen), tensor.WithBacking(bias)),
	}
}

// rows splits [1, n, vocab] (or [n, vocab]) logits into n rows.
func rows(t testing.TB, d *tensor.Dense, n int) [][]float32 {
	t.Helper()
	f := floats(t, d)
	if n == 0 || len(f)%n != 0 {
		t.Fatalf("logits %v do not hold %d rows", d.Shape(), n)
	}
	v := len(f) / n
	out := make([][]float32, n)
	for i := range out {
		out[i] = append([]float32(nil), f[i*v:(i+1)*v]...)
	}
	return out
}

// explicitSeq runs an exported decoder as exported: each step feeds the
// last step's present outputs back as past inputs (batch 1).
type explicitSeq struct {
	t    testing.TB
	s    *Session
	n    int
	past map[string]*tensor.Dense // by input name
	ins  map[string]bool
}

func newExplicitSeq(t testing.TB, s *Session) *explicitSeq {
	e := &explicitSeq{t: t, s: s, ins: map[string]bool{}}
	for _, p := range s.Inputs() {
		e.ins[p.Name] = true
	}
	e.reset()
	return e
}

// reset empties the past: every symbolic axis of a past input is 0 except
// the batch.
func (e *explicitSeq) reset() {
	e.n = 0
	e.past = map[string]*tensor.Dense{}
	for _, p := range e.s.Inputs() {
		if !strings.HasPrefix(p.Name, "past_key_values") {
			continue
		}
		dims := make([]int, len(p.Shape))
		for i, d := range p.Shape {
			if k, ok := d.Const(); ok {
				dims[i] = int(k)
			} else if name, _ := d.SymName(); strings.Contains(name, "batch") {
				dims[i] = 1
			}
		}
		e.past[p.Name] = tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(dims...))
	}
}

// step appends tokens at positions n, n+1, ... and returns their logits.
func (e *explicitSeq) step(tokens []int) ([][]float32, error) {
	n := len(tokens)
	ids, pos := make([]int64, n), make([]int64, n)
	for i, tok := range tokens {
		ids[i], pos[i] = int64(tok), int64(e.n+i)
	}
	in := map[string]*tensor.Dense{"input_ids": tensor.New(tensor.WithShape(1, n), tensor.WithBacking(ids))}
	if e.ins["position_ids"] {
		in["position_ids"] = tensor.New(tensor.WithShape(1, n), tensor.WithBacking(pos))
	}
	if e.ins["attention_mask"] {
		mask := make([]int64, e.n+n)
		for i := range mask {
			mask[i] = 1
		}
		in["attention_mask"] = tensor.New(tensor.WithShape(1, e.n+n), tensor.WithBacking(mask))
	}
	for name, d := range e.past {
		in[name] = d
	}
	out, err := e.s.Run(in)
	if err != nil {
		return nil, err
	}
	for name := range e.past {
		pr := out[strings.Replace(name, "past_key_values", "present", 1)]
		if pr == nil {
			e.t.Fatalf("no present output for %s", name)
		}
		e.past[name] = pr
	}
	e.n += n
	return rows(e.t, out["logits"], n), nil
}

func openModel(t testing.TB, model string, opts Options) *Session {
	t.Helper()
	s, err := Open(filepath.Join(modelsDir, model, "model.onnx"), opts)
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	return s
}

var kvModels = []string{"llama", "gpt2"}

// TestKVCacheRewrite checks the rewritten interface and program: the
// cache inputs in, the logits out, one KVWrite per cache tensor, attention
// reading the views in place under kv_bias, and no step left that moves
// cache contents.
func TestKVCacheRewrite(t *testing.T) {
	heads := map[string][2]int{"llama": {2, 16}, "gpt2": {4, 16}}
	for _, model := range kvModels {
		t.Run(model, func(t *testing.T) {
			s := openModel(t, model, Options{Kernels: testLib, KVCache: &KVConfig{MaxContext: 48, Pad: 16}})
			defer s.Close()
			var ins, outs []string
			for _, p := range s.Inputs() {
				ins = append(ins, p.Name+symshape.FormatShape(p.Shape))
			}
			for _, p := range s.Outputs() {
				outs = append(outs, p.Name)
			}
			want := map[string]bool{"input_ids[batch, seq]": true, "position_ids[batch, seq]": true,
				"kv_slots[batch, seq]": true, "kv_bias[batch, 1, seq, kv_len]": true}
			if len(ins) != len(want) {
				t.Errorf("inputs %v; want %v", ins, want)
			}
			for _, in := range ins {
				if !want[in] {
					t.Errorf("unexpected input %s (inputs %v)", in, ins)
				}
			}
			if len(outs) != 1 || outs[0] != "logits" {
				t.Errorf("outputs %v; want [logits]", outs)
			}
			if m := s.Maxima(); m["batch"] != 1 || m[KVLengthSymbol] != 48 || m["seq"] != 48 {
				t.Errorf("maxima %v; want batch 1, kv_len 48, seq 48", m)
			}
			info, ok := s.KVInfo()
			if !ok || len(info.Layers) != 4 || info.MaxContext != 48 || info.Pad != 16 {
				t.Fatalf("KVInfo %+v, %v; want 4 buffers of 48 slots, pad 16", info, ok)
			}
			if h := heads[model]; info.Bytes() != int64(4*48*h[0]*h[1]*4) {
				t.Errorf("cache of %d bytes; want 4 buffers of %d", info.Bytes(), 48*h[0]*h[1]*4)
			}
			for _, l := range info.Layers {
				h := heads[model]
				if l.KVHeads != h[0] || l.HeadDim != h[1] || l.Bytes != int64(48*h[0]*h[1]*4) {
					t.Errorf("layer %+v; want %d heads of %d, %d bytes", l, h[0], h[1], 48*h[0]*h[1]*4)
				}
			}
			writes, atts := 0, 0
			for _, n := range s.model.Graph.Nodes {
				switch n.OpType {
				case "KVWrite":
					writes++
				case "Attention":
					atts++
					if len(n.Inputs) < 4 || n.Inputs[3] == nil || n.Inputs[3].Name != KVBiasInput {
						t.Errorf("attention %s does not take kv_bias as its mask", n.Name)
					}
					for i, a := range []string{"k_perm", "v_perm"} {
						p, _ := n.AttrInts(a)
						if fmt.Sprint(p) != "[0 2 1 3]" || n.Inputs[i+1].Producer == nil || n.Inputs[i+1].Producer.OpType != "KVWrite" {
							t.Errorf("attention %s: %s %v of %s; want [0 2 1 3] of a KVWrite view", n.Name, a, p, n.Inputs[i+1].Name)
						}
					}
					if n.AttrInt("causal", 0) != 0 {
						t.Errorf("attention %s is still causal", n.Name)
					}
				case "Concat":
					for _, v := range n.Inputs {
						if v != nil && (strings.Contains(v.Name, "past") || v.Producer != nil && v.Producer.OpType == "KVWrite") {
							t.Errorf("Concat %s still reads %s", n.Name, v.Name)
						}
					}
				}
			}
			if writes != 4 || atts != 2 {
				t.Errorf("%d KVWrite and %d Attention nodes; want 4 and 2", writes, atts)
			}
		})
	}
}

// cmpRows compares logits rows; fp16 runs are held to a cosine of 0.999,
// fp32 to a max error of 1e-4 of the reference's scale.
func cmpRows(t *testing.T, what string, got, want []float32, fp16 bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	rel, cos, worst := compare(got, want)
	if fp16 {
		if !(cos >= 0.999) {
			t.Errorf("%s: cosine %.6f < 0.999", what, cos)
		}
		return
	}
	if !(rel <= 1e-4) {
		t.Errorf("%s: error %.3e of the scale at %d (got %v, want %v)", what, rel, worst, got[worst], want[worst])
	}
}

// TestKVCacheMatchesExplicit runs the reference prefill and decode cases
// through the explicit model (past in, present out, batch 2) and through
// the in-place cache one row at a time (row 1 of LLaMA's case is
// left-padded: the in-place run simply leaves the padding out), on both
// backends and in fp16. The logits must agree, and the explicit ones must
// agree with PyTorch.
func TestKVCacheMatchesExplicit(t *testing.T) {
	type backend struct {
		name string
		opts Options
		fp16 bool
	}
	bes := []backend{
		{"opencl-fp32", Options{Kernels: testLib, Max: testMax}, false},
		{"opencl-fp16", Options{Kernels: testLib, Max: testMax, Precision: FP16}, true},
		{"go-fp32", Options{Device: "go", Max: testMax}, false},
	}
	for _, model := range kvModels {
		cases := loadCases(t, model)
		var prefill, decode refCase
		for _, rc := range cases {
			switch rc.name {
			case "prefill":
				prefill = rc
			case "decode":
				decode = rc
			}
		}
		for _, be := range bes {
			t.Run(model+"/"+be.name, func(t *testing.T) {
				ex := openModel(t, model, be.opts)
				defer ex.Close()
				wantP, err := ex.Run(prefill.inputs)
				if err != nil {
					t.Fatal(err)
				}
				wantD, err := ex.Run(decode.inputs)
				if err != nil {
					t.Fatal(err)
				}
				cmpRows(t, "explicit prefill vs PyTorch", floats(t, wantP["logits"]), floats(t, prefill.outputs["logits"]), be.fp16)
				cmpRows(t, "explicit decode vs PyTorch", floats(t, wantD["logits"]), floats(t, decode.outputs["logits"]), be.fp16)

				opts := be.opts
				opts.Max = nil
				opts.KVCache = &KVConfig{MaxContext: 32}
				s := openModel(t, model, opts)
				defer s.Close()
				q := newKVSeq(t, s, 64)
				ids := prefill.inputs["input_ids"].Data().([]int64)
				b, n := prefill.inputs["input_ids"].Shape()[0], prefill.inputs["input_ids"].Shape()[1]
				pRows := rows(t, wantP["logits"], b*n)
				dRows := rows(t, wantD["logits"], b)
				for r := 0; r < b; r++ {
					var toks, pos, slots, at []int
					for i := 0; i < n; i++ {
						p := i
						if m := prefill.inputs["attention_mask"]; m != nil {
							if m.Data().([]int64)[r*n+i] == 0 {
								continue
							}
							p = int(prefill.inputs["position_ids"].Data().([]int64)[r*n+i])
						}
						toks, pos, slots, at = append(toks, int(ids[r*n+i])), append(pos, p), append(slots, len(slots)), append(at, i)
					}
					q.reset()
					got, err := q.step(toks, pos, slots)
					if err != nil {
						t.Fatal(err)
					}
					for i, k := range at {
						cmpRows(t, fmt.Sprintf("prefill row %d token %d", r, k), got[i], pRows[r*n+k], be.fp16)
					}
					next := len(toks)
					if p := decode.inputs["position_ids"]; p != nil {
						next = int(p.Data().([]int64)[r])
					}
					got, err = q.step([]int{int(decode.inputs["input_ids"].Data().([]int64)[r])}, []int{next}, []int{len(slots)})
					if err != nil {
						t.Fatal(err)
					}
					cmpRows(t, fmt.Sprintf("decode row %d", r), got[0], dRows[r], be.fp16)
				}
			})
		}
	}
}

// TestKVCacheDecodeNoCopies steps both decoders explicitly and in place:
// in place, no decode step moves cache contents (no copy kernel reads the
// cache, no buffer copy on the device) and none allocates, also when the
// attended length crosses a padding boundary; explicitly, the Concats copy
// at least the whole cache every step, which the counter must see.
func TestKVCacheDecodeNoCopies(t *testing.T) {
	dev := testLib.Device()
	for _, model := range kvModels {
		t.Run(model, func(t *testing.T) {
			s := openModel(t, model, Options{Kernels: testLib, KVCache: &KVConfig{MaxContext: 40, Pad: 8}})
			defer s.Close()
			info, _ := s.KVInfo()
			q := newKVSeq(t, s, 8)
			ex := openModel(t, model, Options{Kernels: testLib, Max: map[string]int64{"batch": 1, "seq": 40, "past": 40}})
			defer ex.Close()
			e := newExplicitSeq(t, ex)
			prompt := []int{5, 17, 99, 3, 250}
			pos := []int{0, 1, 2, 3, 4}
			if _, err := q.step(prompt, pos, pos); err != nil {
				t.Fatal(err)
			}
			if _, err := e.step(prompt); err != nil {
				t.Fatal(err)
			}
			lens := map[int]bool{}
			for p := 5; p < 30; p++ {
				before := dev.Stats()
				if _, err := q.step([]int{p * 7 % 256}, []int{p}, []int{p}); err != nil {
					t.Fatal(err)
				}
				after := dev.Stats()
				lens[q.lastLen] = true
				cs := s.LastRunCopies()
				if cs.KVBytes != 0 || cs.KVSteps != 0 {
					t.Errorf("in place, decode at %d: %d copy steps moved %d bytes of cache", p, cs.KVSteps, cs.KVBytes)
				}
				// The writes: one new row per cache tensor.
				var row int64
				for _, l := range info.Layers {
					row += int64(l.KVHeads * l.HeadDim * 4)
				}
				if cs.KVWritten != row {
					t.Errorf("in place, decode at %d: the cache writes wrote %d bytes; one row per tensor is %d", p, cs.KVWritten, row)
				}
				if d := after.BytesCopied - before.BytesCopied; d != 0 {
					t.Errorf("in place, decode at %d: %d bytes copied on the device", p, d)
				}
				if d := after.Allocs - before.Allocs; d != 0 {
					t.Errorf("in place, decode at %d: %d device allocations", p, d)
				}
				if _, err := e.step([]int{p * 7 % 256}); err != nil {
					t.Fatal(err)
				}
				// Every cache tensor is copied by its Concat at least.
				var least int64
				for _, l := range info.Layers {
					least += int64((p + 1) * l.KVHeads * l.HeadDim * 4)
				}
				if cs := ex.LastRunCopies(); cs.KVBytes < least {
					t.Errorf("explicit, decode at %d: the counter saw %d bytes of cache copied; the Concats alone copy %d", p, cs.KVBytes, least)
				}
			}
			if len(lens) < 3 {
				t.Errorf("attended lengths %v: the steps should have crossed padding boundaries", lens)
			}
			t.Logf("explicit decode at 30 tokens: %+v; in place: %+v", ex.LastRunCopies(), s.LastRunCopies())
		})
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// TestKVCacheGreedy generates 16 tokens greedily both ways from the same
// prompt: the ids must be identical, and every step's logits agree.
func TestKVCacheGreedy(t *testing.T) {
	for _, model := range kvModels {
		t.Run(model, func(t *testing.T) {
			s := openModel(t, model, Options{Kernels: testLib, KVCache: &KVConfig{MaxContext: 32, Pad: 4}})
			defer s.Close()
			ex := openModel(t, model, Options{Kernels: testLib, Max: map[string]int64{"batch": 1, "seq": 32, "past": 32}})
			defer ex.Close()
			q, e := newKVSeq(t, s, 4), newExplicitSeq(t, ex)
			prompt := []int{11, 200, 42, 7, 133, 90}
			pos := []int{0, 1, 2, 3, 4, 5}
			a, err := q.step(prompt, pos, pos)
			if err != nil {
				t.Fatal(err)
			}
			b, err := e.step(prompt)
			if err != nil {
				t.Fatal(err)
			}
			var gotIDs, wantIDs []int
			ta, tb := argmax(a[len(a)-1]), argmax(b[len(b)-1])
			for i := 0; i < 16; i++ {
				gotIDs, wantIDs = append(gotIDs, ta), append(wantIDs, tb)
				p := len(prompt) + i
				if a, err = q.step([]int{ta}, []int{p}, []int{p}); err != nil {
					t.Fatal(err)
				}
				if b, err = e.step([]int{tb}); err != nil {
					t.Fatal(err)
				}
				cmpRows(t, fmt.Sprintf("step %d", i), a[0], b[0], false)
				ta, tb = argmax(a[0]), argmax(b[0])
			}
			if fmt.Sprint(gotIDs) != fmt.Sprint(wantIDs) {
				t.Errorf("in place generated %v, explicit %v", gotIDs, wantIDs)
			}
			t.Logf("greedy ids: %v", gotIDs)
		})
	}
}

// TestKVCacheSlotsAndPadding writes the same ten tokens into contiguous
// slots with no padding, with padding, into scattered slots (slot !=
// position, out of order), and unfused (the rewrite fuses attention
// itself): the next token's logits must not change.
func TestKVCacheSlotsAndPadding(t *testing.T) {
	toks := []int{3, 141, 59, 26, 53, 58, 97, 93, 238, 46}
	pos := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	scattered := []int{21, 4, 17, 0, 30, 9, 12, 27, 2, 6}
	for _, model := range kvModels {
		t.Run(model, func(t *testing.T) {
			run := func(opts Options, pad int, slots []int, next int) []float32 {
				t.Helper()
				opts.KVCache = &KVConfig{MaxContext: 32, Pad: pad}
				s := openModel(t, model, opts)
				defer s.Close()
				q := newKVSeq(t, s, pad)
				if _, err := q.step(toks, pos, slots); err != nil {
					t.Fatal(err)
				}
				out, err := q.step([]int{77}, []int{10}, []int{next})
				if err != nil {
					t.Fatal(err)
				}
				return out[0]
			}
			base := run(Options{Kernels: testLib}, 1, pos, 10)
			for _, c := range []struct {
				name  string
				opts  Options
				pad   int
				slots []int
				next  int
			}{
				{"padded", Options{Kernels: testLib}, 16, pos, 10},
				{"scattered slots", Options{Kernels: testLib}, 8, scattered, 15},
				{"unfused", Options{Kernels: testLib, Rewrites: []Rewrite{}}, 8, pos, 10},
				{"go backend", Options{Device: "go"}, 8, scattered, 31},
			} {
				got := run(c.opts, c.pad, c.slots, c.next)
				rel, _, worst := compare(got, base)
				if !(rel <= 1e-5) {
					t.Errorf("%s: next-token logits differ by %.3e of the scale at %d", c.name, rel, worst)
				}
			}
		})
	}
}

// TestKVCacheErrors checks what Open and Run refuse.
func TestKVCacheErrors(t *testing.T) {
	llama := filepath.Join(modelsDir, "llama", "model.onnx")
	if _, err := Open(llama, Options{Kernels: testLib, KVCache: &KVConfig{}}); err == nil || !strings.Contains(err.Error(), "MaxContext") {
		t.Errorf("MaxContext 0: %v", err)
	}
	if _, err := Open(filepath.Join(modelsDir, "bert", "model.onnx"), Options{Kernels: testLib, KVCache: &KVConfig{MaxContext: 16}}); err == nil || !strings.Contains(err.Error(), "no Concat(past, new") {
		t.Errorf("a model without a cache: %v", err)
	}
	s := openModel(t, "llama", Options{Kernels: testLib, KVCache: &KVConfig{MaxContext: 16}})
	defer s.Close()
	slotPos := make([]int, 16)
	for i := range slotPos {
		slotPos[i] = -1
	}
	// Batch 2.
	in := kvStepInputs([]int{1}, []int{0}, []int{0}, slotPos, 16)
	in["input_ids"] = tensor.New(tensor.WithShape(2, 1), tensor.WithBacking([]int64{1, 2}))
	if _, err := s.Run(in); err == nil || !strings.Contains(err.Error(), "batch") {
		t.Errorf("batch 2: %v", err)
	}
	// An attended length beyond the cache.
	big := append(slotPos, -1)
	if _, err := s.Run(kvStepInputs([]int{1}, []int{0}, []int{0}, big, 17)); err == nil || !strings.Contains(err.Error(), KVLengthSymbol) {
		t.Errorf("kv_len 17 of 16 slots: %v", err)
	}
	// A past input is no input any more.
	in = kvStepInputs([]int{1}, []int{0}, []int{0}, slotPos, 16)
	in["past_key_values.0.key"] = tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(1, 2, 0, 16))
	if _, err := s.Run(in); err == nil || !strings.Contains(err.Error(), "no such input") {
		t.Errorf("a past input: %v", err)
	}
	// The session still works.
	if _, err := s.Run(kvStepInputs([]int{1}, []int{0}, []int{0}, slotPos, 16)); err != nil {
		t.Errorf("after the errors: %v", err)
	}
}

// TestKVWriteLowering checks the write on its own against the kernel
// reference on both backends: rows read through new_perm, slots out of
// order, a slot outside the cache skipped, a second run adding to what the
// first wrote, and the view as long as the input "len" says. The view is
// read back through Mul(view, 1).
func TestKVWriteLowering(t *testing.T) {
	const capacity, heads, hd = 8, 2, 4
	for _, dev := range []Options{{Kernels: testLib}, {Device: "go"}} {
		m, err := graph.Parse([]byte{0x3a, 0x03, 0x12, 0x01, 'g', 0x42, 0x02, 0x10, 17}, "") // graph "g", opset 17
		if err != nil {
			t.Fatal(err)
		}
		g := m.Graph
		input := func(name string, dt dtype.Type, dims ...graph.Dim) *graph.Value {
			v := g.NewValue(name)
			v.Type, v.Declared = dt, dims
			g.Inputs = append(g.Inputs, v)
			return v
		}
		k := func(v int64) graph.Dim { return graph.Dim{Value: v} }
		sym := func(s string) graph.Dim { return graph.Dim{Value: -1, Param: s} }
		x := input("x", dtype.Float32, k(1), sym("seq"), k(heads), k(hd)) // read through [0 2 1 3]
		slots := input("slots", dtype.Int64, k(1), sym("seq"))
		input("len", dtype.Float32, sym("n")) // binds the view's length; nothing reads it
		one := g.NewValue("one")
		one.Type = dtype.Float32
		if one.Const, err = graph.Float32Tensor("one", nil, []float32{1}); err != nil {
			t.Fatal(err)
		}
		g.Initializers = append(g.Initializers, one)
		view, y := g.NewValue("view"), g.NewValue("y")
		for _, n := range []*graph.Node{
			{Name: "write", OpType: "KVWrite", Domain: "tlite", Inputs: []*graph.Value{x, slots}, Outputs: []*graph.Value{view},
				Attrs: map[string]*graph.Attr{
					"new_perm": {Name: "new_perm", Kind: graph.KindInts, Ints: []int64{0, 2, 1, 3}},
					"capacity": {Name: "capacity", Kind: graph.KindInt, I: capacity},
					"length":   {Name: "length", Kind: graph.KindString, S: "n"},
				}},
			{Name: "read", OpType: "Mul", Inputs: []*graph.Value{view, one}, Outputs: []*graph.Value{y}},
		} {
			if err := g.AddNode(n); err != nil {
				t.Fatal(err)
			}
		}
		g.Outputs = append(g.Outputs, y)
		opts := dev
		opts.Rewrites = []Rewrite{}
		opts.Max = map[string]int64{"seq": capacity, "n": capacity}
		s, err := OpenModel(m, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := symshape.FormatShape(view.Shape); got != "[1, n, 2, 4]" {
			t.Errorf("view shape %s; want [1, n, 2, 4]", got)
		}
		ref := make([]byte, capacity*heads*hd*4)
		cv := kernels.View{Shape: []int{1, heads, capacity, hd}, Strides: []int{capacity * heads * hd, hd, heads * hd, 1}}
		for run, sl := range [][]int64{{5, 1, 9}, {0, 6}} { // 9 is outside the cache: skipped
			xs := kvRand(int64(run+1), 1, len(sl), heads, hd)
			sv, _ := kernels.ContiguousView([]int{1, len(sl), heads, hd}).Permute([]int{0, 2, 1, 3})
			raw := make([]byte, 4*len(floats(t, xs)))
			for i, f := range floats(t, xs) {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
			}
			if err := kernels.KVWriteRef(4, ref, cv, raw, sv, sl, false); err != nil {
				t.Fatal(err)
			}
			length := 7 - run // the view shows a prefix of the slots
			out, err := s.Run(map[string]*tensor.Dense{"x": xs, "slots": tensor.New(tensor.WithShape(1, len(sl)), tensor.WithBacking(sl)),
				"len": tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(length))})
			if err != nil {
				t.Fatal(err)
			}
			got := floats(t, out[y.Name])
			if len(got) != length*heads*hd {
				t.Fatalf("%s run %d: view of %d elements, want %d", s.dev.Name(), run, len(got), length*heads*hd)
			}
			for i, g := range got {
				if want := math.Float32frombits(binary.LittleEndian.Uint32(ref[4*i:])); g != want {
					t.Fatalf("%s run %d: element %d is %v, want %v", s.dev.Name(), run, i, g, want)
				}
			}
		}
		s.Close()
	}
}

// kvRand is a seeded random float32 tensor.
func kvRand(seed int64, shape ...int) *tensor.Dense {
	r := rand.New(rand.NewSource(seed))
	v := make([]float32, numel(shape))
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// BenchmarkKVLayout measures what the cache layout costs attention at
// decode (one query row per head, OpenCL fp32): keys and values read from
// the in-place cache's seq-first buffer [ctx, kv_heads, head_dim] (a head's
// rows are kv_heads*head_dim apart) against the export's head-first
// [kv_heads, ctx, head_dim] (a head's rows contiguous), at equal attended
// lengths; and the write of one new row into either layout. SetBytes
// counts the K and V rows read (or written).
func BenchmarkKVLayout(b *testing.B) {
	dev := testLib.Device()
	alloc := func(n int) kernels.Buf {
		m, err := dev.Alloc(4 * n)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(m.Release)
		if err := dev.Write(m, 0, make([]byte, 4*n)); err != nil {
			b.Fatal(err)
		}
		return kernels.Buf{Mem: m}
	}
	for _, c := range []struct{ heads, kvh, d, ctx int }{{4, 2, 32, 128}, {4, 2, 32, 1024}, {32, 8, 128, 1024}} {
		for _, seqFirst := range []bool{true, false} {
			name := fmt.Sprintf("H=%d/KV=%d/D=%d/L=%d/", c.heads, c.kvh, c.d, c.ctx)
			layout := "head-first"
			kl := kernels.AttnLayout{Batch: c.kvh * c.ctx * c.d, Head: c.ctx * c.d, Seq: c.d}
			if seqFirst {
				layout = "seq-first"
				kl = kernels.AttnLayout{Batch: c.kvh * c.ctx * c.d, Head: c.d, Seq: c.kvh * c.d}
			}
			q, o := alloc(c.heads*c.d), alloc(c.heads*c.d)
			k, v := alloc(c.kvh*c.ctx*c.d), alloc(c.kvh*c.ctx*c.d)
			b.Run(name+"attention/"+layout, func(b *testing.B) {
				p := kernels.AttentionParams{Batch: 1, Heads: c.heads, KVHeads: c.kvh, SeqQ: 1, SeqKV: c.ctx, HeadDim: c.d, K: kl, V: kl}
				b.SetBytes(int64(2 * c.kvh * c.ctx * c.d * 4))
				for i := 0; i < b.N+1; i++ {
					if i == 1 {
						if err := dev.Finish(); err != nil {
							b.Fatal(err)
						}
						b.ResetTimer()
					}
					if err := testLib.Attention(kernels.F32, q, k, v, o, p); err != nil {
						b.Fatal(err)
					}
				}
				if err := dev.Finish(); err != nil {
					b.Fatal(err)
				}
			})
			b.Run(name+"write/"+layout, func(b *testing.B) {
				// One new row in the export's [1, kv_heads, 1, head_dim], at
				// slot ctx-1.
				src, pos := alloc(c.kvh*c.d), alloc(2)
				if err := dev.Write(pos.Mem, 0, binary.LittleEndian.AppendUint64(nil, uint64(c.ctx-1))); err != nil {
					b.Fatal(err)
				}
				cv := kernels.View{Shape: []int{1, c.kvh, c.ctx, c.d}, Strides: []int{kl.Batch, kl.Head, kl.Seq, 1}}
				sv := kernels.ContiguousView([]int{1, c.kvh, 1, c.d})
				b.SetBytes(int64(c.kvh * c.d * 4))
				for i := 0; i < b.N+1; i++ {
					if i == 1 {
						if err := dev.Finish(); err != nil {
							b.Fatal(err)
						}
						b.ResetTimer()
					}
					if err := testLib.KVWrite(4, k, cv, src, sv, pos, dtype.Int64, false); err != nil {
						b.Fatal(err)
					}
				}
				if err := dev.Finish(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
