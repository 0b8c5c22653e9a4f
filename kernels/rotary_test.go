package kernels

import (
	"fmt"
	"strings"
	"testing"
)

// rotaryLiteral computes the rotary embedding the way the exported graph
// writes it, op by op on whole rows: rot = x[:rd]; out = rot*cos +
// concat(-rot[h:], rot[:h])*sin; then concat(out, x[rd:]). cos and sin are
// given per row (already broadcast), rd elements each.
func rotaryLiteral(x, cos, sin []float32, rd int) []float32 {
	h := rd / 2
	half := make([]float32, 0, rd)
	for _, v := range x[h:rd] {
		half = append(half, -v)
	}
	half = append(half, x[:h]...)
	out := make([]float32, len(x))
	for j := 0; j < rd; j++ {
		out[j] = x[j]*cos[j] + half[j]*sin[j]
	}
	copy(out[rd:], x[rd:])
	return out
}

// rotaryCase is x's shape, the rotated part and the cos and sin shapes.
type rotaryCase struct {
	x, cos, sin []int
	rd          int
}

func (c rotaryCase) String() string {
	return fmt.Sprintf("x%v rd%d cos%v sin%v", c.x, c.rd, c.cos, c.sin)
}

var rotaryCases = []rotaryCase{
	// [b, heads, seq, D] with HF's [b, 1, seq, D] tables: decode and prefill.
	{x: []int{1, 2, 1, 6}, cos: []int{1, 1, 1, 6}, sin: []int{1, 1, 1, 6}, rd: 6},
	{x: []int{2, 3, 5, 10}, cos: []int{2, 1, 5, 10}, sin: []int{2, 1, 5, 10}, rd: 10},
	{x: []int{2, 4, 7, 34}, cos: []int{7, 34}, sin: []int{7, 34}, rd: 34},
	// Partial rotary (GPT-NeoX): only the first rd elements turn.
	{x: []int{2, 2, 3, 10}, cos: []int{2, 1, 3, 6}, sin: []int{2, 1, 3, 6}, rd: 6},
	{x: []int{1, 3, 1, 34}, cos: []int{1, 8}, sin: []int{1, 1, 1, 8}, rd: 8},
	// Tables laid out differently from each other, and [b, seq, heads, D].
	{x: []int{2, 5, 3, 6}, cos: []int{2, 5, 1, 6}, sin: []int{5, 1, 6}, rd: 6},
	// Low ranks and a table broadcast along its last axis.
	{x: []int{4, 10}, cos: []int{4, 10}, sin: []int{4, 1}, rd: 10},
	{x: []int{6}, cos: []int{2}, sin: []int{1}, rd: 2},
}

// rotaryWant broadcasts the tables row by row and applies rotaryLiteral.
func rotaryWant(t *testing.T, s Storage, c rotaryCase, x, cos, sin []float32) []float32 {
	t.Helper()
	l := rotaryLayout(t, c)
	cs, ss, d := l.CosStride, l.SinStride, l.Shape[3]
	var want []float32
	row := 0
	for i0 := 0; i0 < l.Shape[0]; i0++ {
		for i1 := 0; i1 < l.Shape[1]; i1++ {
			for i2 := 0; i2 < l.Shape[2]; i2++ {
				rc, rs := make([]float32, c.rd), make([]float32, c.rd)
				for j := range rc {
					rc[j] = cos[i0*cs[0]+i1*cs[1]+i2*cs[2]+j*cs[3]]
					rs[j] = sin[i0*ss[0]+i1*ss[1]+i2*ss[2]+j*ss[3]]
				}
				for _, v := range rotaryLiteral(x[row*d:(row+1)*d], rc, rs, c.rd) {
					want = append(want, roundTrip(s, v))
				}
				row++
			}
		}
	}
	return want
}

// rotaryInputs makes x, cos and sin for c, rounded to s.
func rotaryInputs(s Storage, seed int64, c rotaryCase) (x, cos, sin []float32) {
	x, cos, sin = randVec(seed, numel(c.x)), randVec(seed+1, numel(c.cos)), randVec(seed+2, numel(c.sin))
	for _, v := range [][]float32{x, cos, sin} {
		for i := range v {
			v[i] = roundTrip(s, v[i])
		}
	}
	return x, cos, sin
}

func rotaryLayout(t *testing.T, c rotaryCase) RotaryLayout {
	t.Helper()
	l, err := NewRotaryLayout(c.x, c.cos, c.sin, c.rd)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRotaryRef checks the reference against the graph's literal formula,
// including its in-place form.
func TestRotaryRef(t *testing.T) {
	for i, c := range rotaryCases {
		x, cos, sin := rotaryInputs(F32, int64(10*i), c)
		want := rotaryWant(t, F32, c, x, cos, sin)
		p, l := RotaryParams{Storage: F32, RotaryDim: c.rd}, rotaryLayout(t, c)
		got := make([]float32, len(x))
		if err := RotaryRef(p, l, x, cos, sin, got); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.String(), got, want, 1e-6, 1e-6)
		if err := RotaryRef(p, l, x, cos, sin, x); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.String()+" in place", x, want, 1e-6, 1e-6)
	}
}

// TestRotaryHand checks one rotation by hand: with cos = cos(t) and sin =
// sin(t) over both halves, (1, 0) turns to (cos t, sin t) and (0, 1) to
// (-sin t, cos t); the pass-through element stays.
func TestRotaryHand(t *testing.T) {
	const c, s = 0.6, 0.8
	l := RotaryLayout{Shape: [4]int{1, 1, 2, 3}}
	x := []float32{1, 0, 7, 0, 1, -7}
	out := make([]float32, 6)
	if err := RotaryRef(RotaryParams{Storage: F32, RotaryDim: 2}, l, x, []float32{c}, []float32{s}, out); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "hand", out, []float32{c, s, 7, -s, c, -7}, 1e-7, 0)
}

func rotaryTol(s Storage) (atol, rtol float64) {
	if s == F16 {
		return 2e-3, 2e-3
	}
	return 1e-6, 1e-5
}

func TestRotary(t *testing.T) {
	bothStyles(t, testRotary)
}

func testRotary(t *testing.T) {
	for _, s := range storages {
		for i, c := range rotaryCases {
			x, cos, sin := rotaryInputs(s, int64(100+10*i), c)
			want := rotaryWant(t, s, c, x, cos, sin)
			p := RotaryParams{Storage: s, RotaryDim: c.rd}
			xb, cb, sb := upload(t, s, x), upload(t, s, cos), upload(t, s, sin)
			ob := alloc(t, s, len(x))
			if err := testLib.Rotary(p, cb, sb, RotaryTensor{RotaryLayout: rotaryLayout(t, c), X: xb, Out: ob}, RotaryTensor{}); err != nil {
				t.Fatal(err)
			}
			atol, rtol := rotaryTol(s)
			assertClose(t, fmt.Sprintf("%v %v", s, c), download(t, s, ob, len(x)), want, atol, rtol)
			// In place, as the engine runs it when x is not read again.
			if err := testLib.Rotary(p, cb, sb, RotaryTensor{RotaryLayout: rotaryLayout(t, c), X: xb, Out: xb}, RotaryTensor{}); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("%v %v in place", s, c), download(t, s, xb, len(x)), want, atol, rtol)
		}
	}
}

// TestRotaryPair rotates two tensors sharing the tables in one launch, as
// a layer's queries and keys (grouped-query: fewer key heads), on the
// device (both kernel styles) and the pure-Go device.
func TestRotaryPair(t *testing.T) {
	bothStyles(t, testRotaryPair)
}

func testRotaryPair(t *testing.T) {
	for _, pc := range []struct{ a, b rotaryCase }{
		{rotaryCase{x: []int{2, 4, 3, 10}, cos: []int{2, 1, 3, 10}, sin: []int{2, 1, 3, 10}, rd: 10},
			rotaryCase{x: []int{2, 2, 3, 10}, cos: []int{2, 1, 3, 10}, sin: []int{2, 1, 3, 10}, rd: 10}},
		{rotaryCase{x: []int{1, 3, 1, 34}, cos: []int{1, 8}, sin: []int{1, 8}, rd: 8},
			rotaryCase{x: []int{1, 1, 1, 34}, cos: []int{1, 8}, sin: []int{1, 8}, rd: 8}},
	} {
		// Both tensors read the same tables: make them once, for a.
		for _, s := range storages {
			xa, cos, sin := rotaryInputs(s, 300, pc.a)
			xbv, _, _ := rotaryInputs(s, 400, pc.b)
			wa := rotaryWant(t, s, pc.a, xa, cos, sin)
			wb := rotaryWant(t, s, pc.b, xbv, cos, sin)
			p := RotaryParams{Storage: s, RotaryDim: pc.a.rd}
			cb, sb := upload(t, s, cos), upload(t, s, sin)
			xab, xbb := upload(t, s, xa), upload(t, s, xbv)
			oa, ob := alloc(t, s, len(xa)), alloc(t, s, len(xbv))
			ta := RotaryTensor{RotaryLayout: rotaryLayout(t, pc.a), X: xab, Out: oa}
			tb := RotaryTensor{RotaryLayout: rotaryLayout(t, pc.b), X: xbb, Out: ob}
			if err := testLib.Rotary(p, cb, sb, ta, tb); err != nil {
				t.Fatal(err)
			}
			atol, rtol := rotaryTol(s)
			assertClose(t, fmt.Sprintf("%v a %v", s, pc.a), download(t, s, oa, len(xa)), wa, atol, rtol)
			assertClose(t, fmt.Sprintf("%v b %v", s, pc.b), download(t, s, ob, len(xbv)), wb, atol, rtol)
			if s != F32 {
				continue
			}
			h := &HostDevice{}
			hbuf := func(v []float32) Buf {
				b, err := h.Alloc(4 * len(v))
				if err != nil {
					t.Fatal(err)
				}
				copy(hostF32(b), v)
				return b
			}
			ha := RotaryTensor{RotaryLayout: ta.RotaryLayout, X: hbuf(xa), Out: hbuf(make([]float32, len(xa)))}
			hb := RotaryTensor{RotaryLayout: tb.RotaryLayout, X: hbuf(xbv), Out: hbuf(make([]float32, len(xbv)))}
			if err := h.Rotary(p, hbuf(cos), hbuf(sin), ha, hb); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "host a", hostF32(ha.Out)[:len(xa)], wa, 1e-6, 1e-6)
			assertClose(t, "host b", hostF32(hb.Out)[:len(xbv)], wb, 1e-6, 1e-6)
			if err := h.Rotary(RotaryParams{Storage: F16, RotaryDim: p.RotaryDim}, hbuf(cos), hbuf(sin), ha, hb); err == nil {
				t.Fatal("pure-Go device accepted fp16 storage")
			}
		}
	}
}

func TestRotaryRefused(t *testing.T) {
	for _, c := range []struct {
		name     string
		x, tab   []int
		rd       int
		wantText string
	}{
		{"rank 5", []int{1, 1, 1, 1, 4}, []int{4}, 4, "rank 5"},
		{"table too long", []int{2, 4}, []int{1, 2, 4}, 4, "does not broadcast"},
		{"table of the whole row under partial rotary", []int{2, 10}, []int{2, 10}, 6, "does not broadcast"},
		{"table of another length", []int{3, 4}, []int{2, 4}, 4, "does not broadcast"},
	} {
		_, err := NewRotaryLayout(c.x, c.tab, c.tab, c.rd)
		if err == nil || !strings.Contains(err.Error(), c.wantText) {
			t.Errorf("%s: NewRotaryLayout error %v; want one with %q", c.name, err, c.wantText)
		}
	}
	x := make([]float32, 12)
	shape := [4]int{1, 1, 2, 6}
	for _, c := range []struct {
		name string
		rd   int
		l    RotaryLayout
		tab  int
		want string
	}{
		{"odd rotary dim", 3, RotaryLayout{Shape: shape}, 6, "must be even"},
		{"rotary dim past the row", 8, RotaryLayout{Shape: shape}, 8, "at most"},
		{"short table", 6, RotaryLayout{Shape: shape, CosStride: [4]int{0, 0, 6, 1}, SinStride: [4]int{0, 0, 6, 1}}, 6, "want"},
		{"short x", 6, RotaryLayout{Shape: [4]int{1, 1, 3, 6}, CosStride: [4]int{0, 0, 0, 1}, SinStride: [4]int{0, 0, 0, 1}}, 6, "want"},
		{"negative stride", 6, RotaryLayout{Shape: shape, CosStride: [4]int{0, 0, -6, 1}}, 6, "negative"},
	} {
		p := RotaryParams{Storage: F32, RotaryDim: c.rd}
		tab := make([]float32, c.tab)
		err := RotaryRef(p, c.l, x, tab, tab, x)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: RotaryRef error %v; want one with %q", c.name, err, c.want)
		}
		xb := upload(t, F32, x)
		tb := upload(t, F32, tab)
		if err := testLib.Rotary(p, tb, tb, RotaryTensor{RotaryLayout: c.l, X: xb, Out: xb}, RotaryTensor{}); err == nil {
			t.Errorf("%s: Lib.Rotary accepted it", c.name)
		}
		// The same layout as the second tensor of a launch.
		good := RotaryTensor{RotaryLayout: RotaryLayout{Shape: [4]int{1, 1, 1, 6}, CosStride: c.l.CosStride, SinStride: c.l.SinStride}, X: xb, Out: xb}
		if err := testLib.Rotary(p, tb, tb, good, RotaryTensor{RotaryLayout: c.l, X: xb, Out: xb}); err == nil {
			t.Errorf("%s: Lib.Rotary accepted it as the second tensor", c.name)
		}
	}
}
