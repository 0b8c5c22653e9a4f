package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// esizes are the element sizes every move op is tested with: bool/int8,
// f16, f32/int32, int64.
var esizes = []int{1, 2, 4, 8}

// uploadBytes stores raw on the device at a non-zero element offset.
func uploadBytes(t testing.TB, esize int, raw []byte) Buf {
	t.Helper()
	const pad = 5
	buf := make([]byte, len(raw)+(pad+1)*esize)
	copy(buf[pad*esize:], raw)
	mem, err := testLib.Device().Alloc(len(buf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Release)
	if err := testLib.Device().Write(mem, 0, buf); err != nil {
		t.Fatal(err)
	}
	return Buf{Mem: mem, Off: pad}
}

// allocBytes returns n elements of esize bytes filled with 0xEE, so elements a
// kernel should have written but did not stand out.
func allocBytes(t testing.TB, esize, n int) Buf {
	return uploadBytes(t, esize, bytes.Repeat([]byte{0xEE}, n*esize))
}

func downloadBytes(t testing.TB, esize int, b Buf, n int) []byte {
	t.Helper()
	if err := testLib.Device().Finish(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, n*esize)
	if err := testLib.Device().Read(b.Mem, b.Off*esize, raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// unravel is the row-major multi-index of flat index e.
func unravel(e int, shape []int) []int {
	idx := make([]int, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		idx[i] = e % shape[i]
		e /= shape[i]
	}
	return idx
}

func ravel(idx, shape []int) int {
	e := 0
	for i, d := range shape {
		e = e*d + idx[i]
	}
	return e
}

// naiveMap builds an output of outShape whose element at idx is src element
// from(idx) (a row-major index), or zeros when from returns -1.
func naiveMap(esize int, src []byte, outShape []int, from func(idx []int) int) []byte {
	n := numel(outShape)
	out := make([]byte, n*esize)
	for e := 0; e < n; e++ {
		if k := from(unravel(e, outShape)); k >= 0 {
			copy(out[e*esize:(e+1)*esize], src[k*esize:(k+1)*esize])
		}
	}
	return out
}

func assertBytes(t *testing.T, what string, esize int, got, want []byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			e := i / esize
			t.Fatalf("%s: element %d = %x, want %x", what, e, got[e*esize:(e+1)*esize], want[e*esize:(e+1)*esize])
		}
	}
}

func TestSliceRange(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	// Expected values are Python's list(range(dim))[start:end:step], whose
	// clamping ONNX Slice follows.
	cases := [][6]int64{
		{5, 0, 5, 1, 0, 5},
		{5, 1, -1, 1, 1, 3},
		{5, -2, maxI, 1, 3, 2},
		{5, minI, maxI, 1, 0, 5},
		{5, maxI, minI, -1, 4, 5},
		{5, -1, minI, -1, 4, 5},
		{5, 4, 0, -2, 4, 2},
		{5, 10, -10, -3, 4, 2},
		{5, 3, 3, 1, 0, 0},
		{5, 3, 1, 1, 0, 0},
		{5, 0, 5, 3, 0, 2},
		{5, -100, 100, 2, 0, 3},
		{1, 0, 1, -1, 0, 0},
		{1, maxI, minI, -1, 0, 1},
		{0, 0, 1, 1, 0, 0},
		{6, 2, 5, 2, 2, 2},
		{6, 5, 2, -2, 5, 2},
		{6, -1, -7, -1, 5, 6},
		{6, -7, 7, 4, 0, 2},
	}
	for _, c := range cases {
		first, n := SliceRange(c[0], c[1], c[2], c[3])
		if n != c[5] || (n > 0 && first != c[4]) {
			t.Errorf("SliceRange(dim %d, %d:%d:%d) = first %d, n %d; want %d, %d", c[0], c[1], c[2], c[3], first, n, c[4], c[5])
		}
	}
}

func TestMoveViewHelpers(t *testing.T) {
	v := ContiguousView([]int{2, 3, 4})
	if !v.IsContiguous() || v.Elements() != 24 {
		t.Fatalf("ContiguousView: %+v", v)
	}
	p, err := v.Permute([]int{2, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.Shape, p.Strides) != "[4 2 3] [1 12 4]" || p.IsContiguous() {
		t.Fatalf("Permute: %+v", p)
	}
	if r, _ := v.Permute(nil); fmt.Sprint(r.Shape) != "[4 3 2]" {
		t.Fatalf("default perm: %v", r.Shape)
	}
	if _, err := v.Permute([]int{0, 0, 1}); err == nil {
		t.Fatal("Permute accepted a repeated axis")
	}
	e, err := ContiguousView([]int{3, 1}).Expand([]int{2, 1, 5})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(e.Shape, e.Strides) != "[2 3 5] [0 1 0]" {
		t.Fatalf("Expand: %+v", e)
	}
	if _, err := ExpandShape([]int{3, 2}, []int{3, 4}); err == nil {
		t.Fatal("Expand of 2 to 4 accepted")
	}
	s, err := v.Slice([]int64{-1, 1}, []int64{math.MinInt64, 3}, []int64{2, 1}, []int64{-2, 1})
	if err != nil {
		t.Fatal(err)
	}
	// Axis 2 reversed by 2 from index 3: elements 3, 1; axis 1: 1..2.
	if fmt.Sprint(s.Shape, s.Strides, s.Off) != "[2 2 2] [12 4 -2] 7" {
		t.Fatalf("Slice: %+v", s)
	}
	if _, err := v.Slice([]int64{0}, []int64{1}, []int64{0}, []int64{0}); err == nil {
		t.Fatal("Slice accepted step 0")
	}
}

// randomView composes a random transpose, slice (negative steps included)
// and broadcast over a contiguous base, returning the view and the base
// shape it reads.
func randomView(r *rand.Rand, rank int) (View, []int) {
	base := make([]int, rank)
	for i := range base {
		base[i] = 1 + r.Intn(4)
	}
	v := ContiguousView(base)
	v, _ = v.Permute(r.Perm(rank))
	starts, ends, steps := make([]int64, rank), make([]int64, rank), make([]int64, rank)
	for i, d := range v.Shape {
		steps[i] = int64(r.Intn(2) + 1)
		starts[i], ends[i] = int64(r.Intn(d)), math.MaxInt64
		if r.Intn(3) == 0 {
			steps[i] = -steps[i]
			starts[i], ends[i] = int64(d-1-r.Intn(d)), math.MinInt64
		}
	}
	v, err := v.Slice(starts, ends, nil, steps)
	if err != nil {
		panic(err)
	}
	// Broadcast a size-1 dim, if any, to 3.
	target := append([]int(nil), v.Shape...)
	for i, d := range target {
		if d == 1 && r.Intn(2) == 0 {
			target[i] = 3
		}
	}
	v, err = v.Expand(target)
	if err != nil {
		panic(err)
	}
	return v, base
}

func TestMoveCopy(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	bothStyles(t, func(t *testing.T) {
		for rank := 1; rank <= 8; rank++ {
			for trial := 0; trial < 3; trial++ {
				esize := esizes[(rank+trial)%4]
				sv, base := randomView(r, rank)
				src := randBytes(int64(rank*10+trial), numel(base)*esize)
				n := sv.Elements()
				// Naive: every element by its multi-index through the view.
				want := naiveMap(esize, src, sv.Shape, func(idx []int) int {
					o := sv.Off
					for i, k := range idx {
						o += k * sv.Strides[i]
					}
					return o
				})
				ref := make([]byte, n*esize)
				if err := CopyRef(esize, ref, ContiguousView(sv.Shape), src, sv); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, "CopyRef", esize, ref, want)
				db := allocBytes(t, esize, n)
				if err := testLib.Copy(esize, db, ContiguousView(sv.Shape), uploadBytes(t, esize, src), sv); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, fmt.Sprintf("rank %d esize %d view %+v", rank, esize, sv), esize, downloadBytes(t, esize, db, n), want)
			}
		}
		// Dense copies take the contiguous path; a long one spans several items.
		for _, n := range []int{1, 15, 16, 17, 5000, 9000} {
			for _, esize := range esizes {
				src := randBytes(int64(n), n*esize)
				db := allocBytes(t, esize, n)
				v := ContiguousView([]int{n})
				if err := testLib.Copy(esize, db, v, uploadBytes(t, esize, src), v); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, fmt.Sprintf("dense %d x %d bytes", n, esize), esize, downloadBytes(t, esize, db, n), src)
			}
		}
	})
}

func TestMoveCopyErrors(t *testing.T) {
	b := allocBytes(t, 4, 10)
	if err := testLib.Copy(4, b, ContiguousView([]int{12}), b, ContiguousView([]int{12})); err == nil {
		t.Fatal("copy past the buffer end succeeded")
	}
	if err := testLib.Copy(3, b, ContiguousView([]int{2}), b, ContiguousView([]int{2})); err == nil {
		t.Fatal("element size 3 accepted")
	}
	rev := View{Shape: []int{4}, Strides: []int{-1}, Off: 0} // reaches before the start
	if err := testLib.Copy(4, b, ContiguousView([]int{4}), Buf{Mem: b.Mem, Off: 0}, rev); err == nil {
		t.Fatal("view reaching before the buffer accepted")
	}
	// Empty copies launch nothing and succeed.
	if err := testLib.Copy(4, b, ContiguousView([]int{0, 3}), b, ContiguousView([]int{0, 3})); err != nil {
		t.Fatal(err)
	}
}

func TestMoveTranspose(t *testing.T) {
	cases := []struct{ shape, perm []int }{
		{[]int{5}, []int{0}},
		{[]int{3, 7}, []int{1, 0}},
		{[]int{2, 3, 4}, nil},
		{[]int{1, 6, 5, 17}, []int{0, 2, 1, 3}},
		{[]int{2, 1, 3, 1, 4, 2}, []int{5, 3, 1, 0, 2, 4}},
		{[]int{4, 0, 3}, []int{2, 1, 0}},
	}
	bothStyles(t, func(t *testing.T) {
		for ci, c := range cases {
			for _, esize := range esizes {
				perm := c.perm
				if perm == nil {
					for i := len(c.shape) - 1; i >= 0; i-- {
						perm = append(perm, i)
					}
				}
				out := make([]int, len(perm))
				for k, p := range perm {
					out[k] = c.shape[p]
				}
				src := randBytes(int64(ci), numel(c.shape)*esize)
				want := naiveMap(esize, src, out, func(idx []int) int {
					in := make([]int, len(idx))
					for k, p := range perm {
						in[p] = idx[k]
					}
					return ravel(in, c.shape)
				})
				db := allocBytes(t, esize, numel(out))
				if err := testLib.Transpose(esize, uploadBytes(t, esize, src), c.shape, c.perm, db); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, fmt.Sprintf("Transpose %v %v esize %d", c.shape, c.perm, esize), esize, downloadBytes(t, esize, db, numel(out)), want)
			}
		}
	})
}

func TestMoveSlice(t *testing.T) {
	cases := []struct {
		shape                     []int
		starts, ends, axes, steps []int64
	}{
		{[]int{10}, []int64{2}, []int64{8}, nil, nil},
		{[]int{10}, []int64{-1}, []int64{math.MinInt64}, nil, []int64{-3}},
		{[]int{4, 6}, []int64{1, -2}, []int64{3, 0}, []int64{0, 1}, []int64{1, -1}},
		{[]int{3, 4, 5}, []int64{0}, []int64{math.MaxInt64}, []int64{-1}, []int64{2}},
		{[]int{2, 3, 4, 5, 2, 3}, []int64{1, 4, 2}, []int64{-1, 0, 3}, []int64{1, 3, -1}, []int64{1, -2, 1}},
		{[]int{4, 4}, []int64{3}, []int64{1}, []int64{0}, nil}, // empty result
	}
	for ci, c := range cases {
		for _, esize := range esizes {
			// Naive: the index list of each axis, from SliceRange (checked
			// against Python above).
			lists := make([][]int, len(c.shape))
			for i, d := range c.shape {
				for k := 0; k < d; k++ {
					lists[i] = append(lists[i], k)
				}
			}
			for j := range c.starts {
				ax := j
				if c.axes != nil {
					ax = (int(c.axes[j]) + len(c.shape)) % len(c.shape)
				}
				step := int64(1)
				if c.steps != nil {
					step = c.steps[j]
				}
				first, n := SliceRange(int64(c.shape[ax]), c.starts[j], c.ends[j], step)
				lists[ax] = nil
				for k := int64(0); k < n; k++ {
					lists[ax] = append(lists[ax], int(first+k*step))
				}
			}
			out := make([]int, len(lists))
			for i, l := range lists {
				out[i] = len(l)
			}
			src := randBytes(int64(50+ci), numel(c.shape)*esize)
			want := naiveMap(esize, src, out, func(idx []int) int {
				in := make([]int, len(idx))
				for i, k := range idx {
					in[i] = lists[i][k]
				}
				return ravel(in, c.shape)
			})
			db := allocBytes(t, esize, max(numel(out), 1))
			if err := testLib.Slice(esize, uploadBytes(t, esize, src), c.shape, c.starts, c.ends, c.axes, c.steps, db); err != nil {
				t.Fatal(err)
			}
			assertBytes(t, fmt.Sprintf("Slice case %d esize %d", ci, esize), esize, downloadBytes(t, esize, db, numel(out)), want)
		}
	}
}

func TestMoveExpandTile(t *testing.T) {
	ex := []struct{ shape, target []int }{
		{[]int{3, 1}, []int{2, 3, 4}},
		{[]int{1}, []int{7}},
		{[]int{2, 1, 3}, []int{1, 1}},
		{[]int{1, 5, 1, 1, 2}, []int{3, 5, 2, 4, 2}},
	}
	for ci, c := range ex {
		for _, esize := range esizes {
			out, err := ExpandShape(c.shape, c.target)
			if err != nil {
				t.Fatal(err)
			}
			src := randBytes(int64(70+ci), numel(c.shape)*esize)
			lead := len(out) - len(c.shape)
			want := naiveMap(esize, src, out, func(idx []int) int {
				in := make([]int, len(c.shape))
				for i := range in {
					if c.shape[i] != 1 {
						in[i] = idx[lead+i]
					}
				}
				return ravel(in, c.shape)
			})
			db := allocBytes(t, esize, numel(out))
			if err := testLib.Expand(esize, uploadBytes(t, esize, src), c.shape, c.target, db); err != nil {
				t.Fatal(err)
			}
			assertBytes(t, fmt.Sprintf("Expand %v to %v", c.shape, c.target), esize, downloadBytes(t, esize, db, numel(out)), want)
		}
	}
	tiles := []struct{ shape, reps []int }{
		{[]int{3}, []int{4}},
		{[]int{2, 3}, []int{2, 1}},
		{[]int{2, 1, 3}, []int{1, 3, 2}},
		{[]int{2, 2, 2, 2}, []int{2, 2, 2, 2}}, // rank 8 after doubling: host loop
		{[]int{2, 3}, []int{0, 2}},
	}
	for ci, c := range tiles {
		for _, esize := range esizes {
			out := make([]int, len(c.shape))
			for i := range out {
				out[i] = c.shape[i] * c.reps[i]
			}
			src := randBytes(int64(80+ci), numel(c.shape)*esize)
			want := naiveMap(esize, src, out, func(idx []int) int {
				in := make([]int, len(idx))
				for i, k := range idx {
					in[i] = k % c.shape[i]
				}
				return ravel(in, c.shape)
			})
			db := allocBytes(t, esize, max(numel(out), 1))
			if err := testLib.Tile(esize, uploadBytes(t, esize, src), c.shape, c.reps, db); err != nil {
				t.Fatal(err)
			}
			assertBytes(t, fmt.Sprintf("Tile %v by %v", c.shape, c.reps), esize, downloadBytes(t, esize, db, numel(out)), want)
		}
	}
}

func TestMoveConcatSplit(t *testing.T) {
	cases := []struct {
		shapes [][]int
		axis   int
	}{
		{[][]int{{3}, {5}, {1}}, 0},
		{[][]int{{2, 3}, {2, 1}, {2, 0}, {2, 4}}, 1},
		{[][]int{{1, 2, 3}, {2, 2, 3}}, 0},
		{[][]int{{2, 3, 4, 5}, {2, 3, 2, 5}}, -2},
	}
	for ci, c := range cases {
		for _, esize := range esizes {
			ax := (c.axis + len(c.shapes[0])) % len(c.shapes[0])
			out := append([]int(nil), c.shapes[0]...)
			out[ax] = 0
			var srcs [][]byte
			var bufs []Buf
			var sizes []int
			for i, s := range c.shapes {
				out[ax] += s[ax]
				srcs = append(srcs, randBytes(int64(100*ci+i), numel(s)*esize))
				bufs = append(bufs, uploadBytes(t, esize, srcs[i]))
				sizes = append(sizes, s[ax])
			}
			// Naive: find which input an output index along ax falls in.
			flat := make([]byte, 0)
			n := numel(out)
			for e := 0; e < n; e++ {
				idx := unravel(e, out)
				k, i := idx[ax], 0
				for k >= c.shapes[i][ax] {
					k -= c.shapes[i][ax]
					i++
				}
				idx[ax] = k
				o := ravel(idx, c.shapes[i])
				flat = append(flat, srcs[i][o*esize:(o+1)*esize]...)
			}
			db := allocBytes(t, esize, n)
			if err := testLib.Concat(esize, bufs, c.shapes, c.axis, db); err != nil {
				t.Fatal(err)
			}
			assertBytes(t, fmt.Sprintf("Concat %v axis %d", c.shapes, c.axis), esize, downloadBytes(t, esize, db, n), flat)
			// Split undoes Concat.
			var dsts []Buf
			for _, s := range c.shapes {
				dsts = append(dsts, allocBytes(t, esize, max(numel(s), 1)))
			}
			if err := testLib.Split(esize, uploadBytes(t, esize, flat), out, c.axis, sizes, dsts); err != nil {
				t.Fatal(err)
			}
			for i, s := range c.shapes {
				assertBytes(t, fmt.Sprintf("Split %v part %d", out, i), esize, downloadBytes(t, esize, dsts[i], numel(s)), srcs[i])
			}
		}
	}
	if err := testLib.Concat(4, []Buf{{}, {}}, [][]int{{2, 3}, {3, 3}}, 1, Buf{}); err == nil {
		t.Fatal("Concat of mismatched shapes succeeded")
	}
}

// naivePadSrc maps an output coordinate to the input by bouncing off the
// edges one reflection at a time (independent of the modular form in the
// kernel).
func naivePadSrc(c, b, d int, mode PadMode) int {
	i := c - b
	if i >= 0 && i < d {
		return i
	}
	if d == 0 {
		return -1 // nothing to reflect, repeat or wrap: the constant
	}
	switch mode {
	case PadConstant:
		return -1
	case PadEdge:
		return min(max(i, 0), d-1)
	case PadWrap:
		for i < 0 {
			i += d
		}
		for i >= d {
			i -= d
		}
		return i
	}
	if d == 1 {
		return 0
	}
	for i < 0 || i >= d {
		if i < 0 {
			i = -i
		}
		if i >= d {
			i = 2*(d-1) - i
		}
	}
	return i
}

func TestMovePad(t *testing.T) {
	cases := []struct {
		shape, pads []int
	}{
		{[]int{5}, []int{2, 3}},
		{[]int{3, 4}, []int{1, 0, 2, 3}},
		{[]int{2, 3, 4}, []int{0, 1, 2, 0, 2, 1}},
		{[]int{4, 5}, []int{-1, 2, 0, -2}}, // negative pads crop
		{[]int{1, 2, 3, 2, 3, 2}, []int{0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0}},
		{[]int{2, 3, 4, 5}, []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{[]int{3, 4}, []int{0, 5, 0, 6}},   // more than the size: reflection bounces
		{[]int{1, 3}, []int{5, -1, -2, 5}}, // cropping past the data eats into the padding (found by FuzzGraph); constant mode only
		{[]int{2, 3}, []int{-4, 0, 3, 0}},
	}
	modes := []PadMode{PadConstant, PadReflect, PadEdge, PadWrap}
	for ci, c := range cases {
		for _, mode := range modes {
			if ci >= 7 && mode != PadConstant {
				continue // no data left to reflect, repeat or wrap: refused
			}
			for _, esize := range esizes {
				r := len(c.shape)
				out, err := PadShape(c.shape, c.pads)
				if err != nil {
					t.Fatal(err)
				}
				src := randBytes(int64(120+ci), numel(c.shape)*esize)
				value := uint64(0x0102030405060708)
				// Naive: crop for negative pads, then map each output index.
				want := make([]byte, 0, numel(out)*esize)
				var val [8]byte
				binary.LittleEndian.PutUint64(val[:], value)
				for e := 0; e < numel(out); e++ {
					idx := unravel(e, out)
					in := make([]int, r)
					inside := true
					for i := range idx {
						b, eEnd, d := c.pads[i], c.pads[r+i], c.shape[i]
						lo := 0
						if b < 0 {
							lo, d, b = -b, d+b, 0
						}
						if eEnd < 0 {
							d += eEnd
						}
						d = max(d, 0)
						j := naivePadSrc(idx[i], b, d, mode)
						if j < 0 {
							inside = false
							break
						}
						in[i] = lo + j
					}
					if inside {
						o := ravel(in, c.shape)
						want = append(want, src[o*esize:(o+1)*esize]...)
					} else {
						want = append(want, val[:esize]...)
					}
				}
				ref := make([]byte, len(want))
				if err := PadRef(esize, src, c.shape, c.pads, mode, value, ref); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("Pad %v %v mode %d esize %d", c.shape, c.pads, mode, esize)
				assertBytes(t, what+" ref", esize, ref, want)
				db := allocBytes(t, esize, numel(out))
				if err := testLib.Pad(esize, uploadBytes(t, esize, src), c.shape, c.pads, mode, value, db); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, what, esize, downloadBytes(t, esize, db, numel(out)), want)
			}
		}
	}
}

// uploadIndices stores idx as int32 or int64.
func uploadIndices(t *testing.T, it dtype.Type, idx []int64) Buf {
	t.Helper()
	raw := make([]byte, len(idx)*it.Size())
	for i, v := range idx {
		if it == dtype.Int32 {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(int32(v)))
		} else {
			binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
		}
	}
	return uploadBytes(t, it.Size(), raw)
}

func TestGather(t *testing.T) {
	cases := []struct {
		shape []int
		axis  int
		idx   []int64
	}{
		{[]int{10, 8}, 0, []int64{3, 0, 9, -1, 3}},    // embedding-like
		{[]int{4, 5, 3}, 1, []int64{4, -5, 2, 0, -1}}, // -5: the first
		{[]int{6}, 0, []int64{5}},                     // scalar-like
		{[]int{2, 3, 70}, -1, []int64{69, 0, 1, -70}}, // last axis
		{[]int{3, 100}, 0, []int64{2, 1}},             // inner >= 64
		{[]int{2, 3}, 1, nil},                         // no indices
	}
	for ci, c := range cases {
		for _, it := range []dtype.Type{dtype.Int32, dtype.Int64} {
			for _, esize := range esizes {
				ax := (c.axis + len(c.shape)) % len(c.shape)
				src := randBytes(int64(140+ci), numel(c.shape)*esize)
				out := append(append(append([]int(nil), c.shape[:ax]...), len(c.idx)), c.shape[ax+1:]...)
				want := naiveMap(esize, src, out, func(idx []int) int {
					k := c.idx[idx[ax]]
					if k < 0 {
						k += int64(c.shape[ax])
					}
					if k < 0 || k >= int64(c.shape[ax]) {
						return -1
					}
					in := append([]int(nil), idx...)
					in[ax] = int(k)
					return ravel(in, c.shape)
				})
				ref := make([]byte, len(want))
				if err := GatherRef(esize, src, c.shape, c.axis, c.idx, ref); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("Gather %v axis %d %v esize %d", c.shape, c.axis, it, esize)
				assertBytes(t, what+" ref", esize, ref, want)
				ib := uploadIndices(t, it, append(c.idx, 0))
				db := allocBytes(t, esize, max(numel(out), 1))
				if err := testLib.Gather(esize, uploadBytes(t, esize, src), c.shape, c.axis, ib, it, len(c.idx), db); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, what, esize, downloadBytes(t, esize, db, numel(out)), want)
			}
		}
	}
}

// TestGatherOutOfRange: an index outside [-size, size) is an error naming
// it on both devices: at once from the references and the host device,
// from the next Finish on OpenCL, which then leaves the fault behind.
func TestGatherOutOfRange(t *testing.T) {
	shape := []int{4, 5, 3}
	src := randBytes(9, numel(shape)*4)
	host := &HostDevice{}
	for _, bad := range []int64{5, -6, 1 << 40} {
		idx := []int64{1, bad, 2}
		want := fmt.Sprintf("index %d is out of range for an axis of size 5", bad)
		if bad == 1<<40 {
			want = "out of range for an axis of size 5" // the device reports it clamped to int32
		}
		dst := make([]byte, 4*3*3*4)
		if err := GatherRef(4, src, shape, 1, idx, dst); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GatherRef %d: %v", bad, err)
		}
		hb, _ := host.Alloc(len(src))
		copy(hb.Host, src)
		hi, _ := host.Alloc(8 * 3)
		for i, v := range idx {
			binary.LittleEndian.PutUint64(hi.Host[8*i:], uint64(v))
		}
		hd, _ := host.Alloc(len(dst))
		if err := host.Gather(4, hb, shape, 1, hi, dtype.Int64, 3, hd); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HostDevice.Gather %d: %v", bad, err)
		}
		ei := []int64{0, 1, 2, 3, bad, 0}
		if err := GatherElementsRef(4, src, shape, 1, ei, []int{1, 2, 3}, make([]byte, 4*6)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GatherElementsRef %d: %v", bad, err)
		}
		for _, it := range []dtype.Type{dtype.Int32, dtype.Int64} {
			if it == dtype.Int32 && bad == 1<<40 {
				continue
			}
			db := allocBytes(t, 4, 3*3*4)
			testLib.SetLabel("the gather node")
			if err := testLib.Gather(4, uploadBytes(t, 4, src), shape, 1, uploadIndices(t, it, idx), it, 3, db); err != nil {
				t.Fatal(err)
			}
			err := testLib.Finish()
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the gather node") {
				t.Errorf("Lib.Gather %v %d: Finish = %v", it, bad, err)
			}
			if err := testLib.GatherElements(4, uploadBytes(t, 4, src), shape, 1, uploadIndices(t, it, ei), it, []int{1, 2, 3}, allocBytes(t, 4, 6)); err != nil {
				t.Fatal(err)
			}
			if err := testLib.Finish(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Lib.GatherElements %v %d: Finish = %v", it, bad, err)
			}
			testLib.SetLabel("")
			// The fault is cleared: a good launch finishes clean.
			if err := testLib.Gather(4, uploadBytes(t, 4, src), shape, 1, uploadIndices(t, it, []int64{0, 4}), it, 2, db); err != nil {
				t.Fatal(err)
			}
			if err := testLib.Finish(); err != nil {
				t.Errorf("Finish after a cleared fault: %v", err)
			}
		}
	}
}

func TestGatherElements(t *testing.T) {
	cases := []struct {
		data, idx []int
		axis      int
	}{
		{[]int{3, 3}, []int{2, 3}, 0},
		{[]int{3, 4}, []int{3, 2}, 1},
		{[]int{2, 3, 4}, []int{2, 5, 3}, 1},
		{[]int{2, 1, 3, 2, 2, 3}, []int{1, 1, 2, 2, 4, 3}, -2},
	}
	r := rand.New(rand.NewSource(3))
	for ci, c := range cases {
		ax := (c.axis + len(c.data)) % len(c.data)
		idx := make([]int64, numel(c.idx))
		for i := range idx {
			idx[i] = int64(r.Intn(c.data[ax]*2) - c.data[ax]) // negatives count from the end
		}
		for _, it := range []dtype.Type{dtype.Int32, dtype.Int64} {
			for _, esize := range esizes {
				src := randBytes(int64(160+ci), numel(c.data)*esize)
				want := naiveMap(esize, src, c.idx, func(ix []int) int {
					k := idx[ravel(ix, c.idx)]
					if k < 0 {
						k += int64(c.data[ax])
					}
					if k < 0 || k >= int64(c.data[ax]) {
						return -1
					}
					in := append([]int(nil), ix...)
					in[ax] = int(k)
					return ravel(in, c.data)
				})
				ref := make([]byte, len(want))
				if err := GatherElementsRef(esize, src, c.data, c.axis, idx, c.idx, ref); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("GatherElements %v %v axis %d %v esize %d", c.data, c.idx, c.axis, it, esize)
				assertBytes(t, what+" ref", esize, ref, want)
				db := allocBytes(t, esize, numel(c.idx))
				if err := testLib.GatherElements(esize, uploadBytes(t, esize, src), c.data, c.axis, uploadIndices(t, it, idx), it, c.idx, db); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, what, esize, downloadBytes(t, esize, db, numel(c.idx)), want)
			}
		}
	}
}

func TestKVWrite(t *testing.T) {
	const B, H, S, T, D = 2, 3, 9, 4, 5
	for _, it := range []dtype.Type{dtype.Int32, dtype.Int64} {
		for _, esize := range []int{2, 4} {
			for _, perBatch := range []bool{false, true} {
				cache := randBytes(1, B*H*S*D*esize)
				// New K in the projection's [B, T, H, D] layout, read through a
				// permuted view, so no transpose is materialised.
				src := randBytes(2, B*T*H*D*esize)
				sv, err := ContiguousView([]int{B, T, H, D}).Permute([]int{0, 2, 1, 3})
				if err != nil {
					t.Fatal(err)
				}
				cv := ContiguousView([]int{B, H, S, D})
				pos := []int64{7, 2, 3, -1} // scattered, one out of range
				if perBatch {
					pos = append(pos, 0, 8, 9, 1) // 9 is past the cache
				}
				// Naive expectation.
				want := append([]byte(nil), cache...)
				for b := 0; b < B; b++ {
					for h := 0; h < H; h++ {
						for tk := 0; tk < T; tk++ {
							p := pos[tk]
							if perBatch {
								p = pos[b*T+tk]
							}
							if p < 0 || p >= S {
								continue
							}
							for d := 0; d < D; d++ {
								o := (((b*H+h)*S + int(p)) * D) + d
								i := (((b*T+tk)*H + h) * D) + d
								copy(want[o*esize:(o+1)*esize], src[i*esize:(i+1)*esize])
							}
						}
					}
				}
				ref := append([]byte(nil), cache...)
				if err := KVWriteRef(esize, ref, cv, src, sv, pos, perBatch); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("KVWrite %v esize %d perBatch %v", it, esize, perBatch)
				assertBytes(t, what+" ref", esize, ref, want)
				cb := uploadBytes(t, esize, cache)
				if err := testLib.KVWrite(esize, cb, cv, uploadBytes(t, esize, src), sv, uploadIndices(t, it, pos), it, perBatch); err != nil {
					t.Fatal(err)
				}
				assertBytes(t, what, esize, downloadBytes(t, esize, cb, len(cache)/esize), want)
			}
		}
	}
	// Consecutive host positions: a strided copy into the cache.
	esize := 4
	cache := randBytes(3, B*H*S*D*esize)
	src := randBytes(4, B*H*T*D*esize)
	cv, sv := ContiguousView([]int{B, H, S, D}), ContiguousView([]int{B, H, T, D})
	want := append([]byte(nil), cache...)
	if err := KVWriteRef(esize, want, cv, src, sv, []int64{5, 6, 7, 8}, false); err != nil {
		t.Fatal(err)
	}
	cb := uploadBytes(t, esize, cache)
	if err := testLib.KVWriteAt(esize, cb, cv, uploadBytes(t, esize, src), sv, 5); err != nil {
		t.Fatal(err)
	}
	assertBytes(t, "KVWriteAt", esize, downloadBytes(t, esize, cb, len(cache)/esize), want)
	if err := testLib.KVWriteAt(esize, cb, cv, uploadBytes(t, esize, src), sv, 6); err == nil {
		t.Fatal("KVWriteAt past the cache end succeeded")
	}
}

// BenchmarkTranspose0213 swaps the head and sequence axes of a
// [1, 64, 32, 128] fp32 tensor (the attention reshape), 1 MiB each way.
func BenchmarkTranspose0213(b *testing.B) {
	shape := []int{1, 64, 32, 128}
	n := numel(shape)
	src := upload(b, F32, randVec(1, n))
	dst := alloc(b, F32, n)
	perm := []int{0, 2, 1, 3}
	if err := testLib.Transpose(4, src, shape, perm, dst); err != nil {
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(2 * n * 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := testLib.Transpose(4, src, shape, perm, dst); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}
