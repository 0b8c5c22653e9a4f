package kernels

import (
	"fmt"
	"math"
	"testing"
)

// statsAccCase is an attention whose statistics are accumulated: odd head
// counts, key counts that are not multiples of 16 (nor of the CPU launch's
// keys per work-item), a cache read in place, and masks with -inf and
// replaced entries.
type statsAccCase struct {
	name                         string
	heads, kvHeads, sq, skv, dim int
	capacity                     int  // K rows allocated per kv head (0: skv)
	causal                       bool // causal with past skv-sq
	mask                         int  // 0 none, 1 broadcast [1,1,1,Skv], 2 per head [1,H,Sq,Skv]
}

var statsAccCases = []statsAccCase{
	{"decode 3 heads, 37 keys in a cache of 48", 3, 3, 1, 37, 32, 48, true, 1},
	{"chunk 6:3 heads, 7 rows over 45 keys, per-head mask, d 12", 6, 3, 7, 45, 12, 0, true, 2},
	{"decode 5:1 heads over 1001 keys", 5, 1, 1, 1001, 32, 0, true, 0},
	{"prefill 3:1 heads, 19 rows, d 24", 3, 1, 19, 19, 24, 0, true, 0},
	{"non-causal 7 heads, 5 rows over 33 keys, broadcast mask", 7, 7, 5, 33, 16, 0, false, 1},
}

// TestAttentionStatsAcc: two accumulating calls (weight 8 with the
// counts, then weight 1 without) onto non-zero totals give, on OpenCL in
// both storages (the CPU kernel, and the GPU one launched on this device)
// and on the host device, the totals computed from a full
// probability dump: the column sums added over heads, head 0's counts,
// each column's largest probability over heads and rows kept against the
// peaks already there, and keys past Skv untouched.
func TestAttentionStatsAcc(t *testing.T) {
	for _, c := range statsAccCases {
		for _, dev := range []string{"opencl", "opencl-gpu-launch", "go"} {
			for _, s := range storages {
				if dev == "go" && s == F16 {
					continue
				}
				if (c.dim == 24 || c.dim == 12) && s == F16 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", c.name, dev, s), func(t *testing.T) {
					testStatsAcc(t, c, dev, s)
				})
			}
		}
	}
}

func testStatsAcc(t *testing.T, c statsAccCase, dev string, s Storage) {
	statsAccGPU = dev == "opencl-gpu-launch"
	defer func() { statsAccGPU = false }()
	d, capacity := c.dim, c.capacity
	if capacity == 0 {
		capacity = c.skv
	}
	p := AttentionParams{Batch: 1, Heads: c.heads, KVHeads: c.kvHeads, SeqQ: c.sq, SeqKV: c.skv, HeadDim: d,
		Scale: float32(1 / math.Sqrt(float64(d))), Causal: c.causal}
	if c.causal {
		p.Past = c.skv - c.sq
	}
	p.K = AttnLayout{Batch: c.kvHeads * capacity * d, Head: capacity * d, Seq: d}
	p.V = p.K
	q := laRand(61, c.heads*c.sq*d, s)
	for i := range q {
		q[i] = roundTrip(s, 3*q[i])
	}
	k := laRand(62, c.kvHeads*capacity*d, s)
	v := laRand(63, c.kvHeads*capacity*d, s)
	var mask []float32
	switch c.mask {
	case 1:
		mask = laRand(64, c.skv, s)
		p.MaskStrides = [4]int{0, 0, 0, 1}
	case 2:
		mask = laRand(64, c.heads*c.sq*c.skv, s)
		p.MaskStrides = [4]int{0, c.sq * c.skv, c.skv, 1}
	}
	for i := range mask {
		switch {
		case i%5 == 3:
			mask[i] = float32(math.Inf(-1))
		case i%7 == 2:
			mask[i] = -math.MaxFloat32
		}
	}
	// The expected totals, from the dump.
	pn, err := p.norm()
	if err != nil {
		t.Fatal(err)
	}
	probs, counts := probsDump(q, k, mask, pn)
	cols := columnSums(probs, pn)
	peaks := columnPeaks(probs, pn)
	const extra = 5 // keys past Skv that must stay as they were
	n := c.skv + extra
	init := make([]float32, n)
	for j := range init {
		init[j] = 0.25 * float32(j%3)
	}
	// Peaks start small but not zero, so both a raised and a kept peak
	// occur.
	initPeak := make([]float32, n)
	for j := range initPeak {
		initPeak[j] = 0.002 * float32(j%3)
	}
	wantSum, wantCnt, wantPeak := make([]float32, n), make([]float32, n), append([]float32(nil), initPeak...)
	for j := range init {
		wantSum[j], wantCnt[j] = init[j], init[j]
		if j >= c.skv {
			continue
		}
		for h := 0; h < c.heads; h++ {
			wantPeak[j] = max(wantPeak[j], peaks[h*c.skv+j])
		}
		var col float64
		for h := 0; h < c.heads; h++ {
			col += float64(cols[h*c.skv+j])
		}
		wantSum[j] += float32(9 * col)
		wantCnt[j] += float32(8 * counts[j])
	}
	no, nl := c.heads*c.sq*d, c.heads*c.sq
	var sum, cnt, peak []float32
	if dev == "go" {
		hd := &HostDevice{}
		buf := func(xs []float32) Buf {
			b := make([]byte, 4*len(xs))
			for i, x := range xs {
				putElem(b, F32, i, x)
			}
			return Buf{Host: b}
		}
		qb, kb, lb := buf(q), buf(k), buf(make([]float32, nl))
		sb, cb, pb := buf(init), buf(init), buf(initPeak)
		if mask != nil {
			p.Mask = buf(mask)
		}
		p.LSE = lb
		if err := hd.Attention(F32, qb, kb, buf(v), buf(make([]float32, no)), p); err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct {
			w   float32
			cnt bool
		}{{8, true}, {1, false}} {
			if err := hd.AttentionStatsAcc(F32, qb, kb, lb, sb, cb, pb, p, call.w, call.cnt); err != nil {
				t.Fatal(err)
			}
		}
		sum, cnt, peak = hostF32(sb)[:n], hostF32(cb)[:n], hostF32(pb)[:n]
	} else {
		if mask != nil {
			p.Mask = upload(t, s, mask)
		}
		qb, kb, lb := upload(t, s, q), upload(t, s, k), alloc(t, F32, nl)
		sb, cb, pb := upload(t, F32, init), upload(t, F32, init), upload(t, F32, initPeak)
		p.LSE = lb
		if err := testLib.Attention(s, qb, kb, upload(t, s, v), alloc(t, s, no), p); err != nil {
			t.Fatal(err)
		}
		for _, call := range []struct {
			w   float32
			cnt bool
		}{{8, true}, {1, false}} {
			if err := testLib.AttentionStatsAcc(s, qb, kb, lb, sb, cb, pb, p, call.w, call.cnt); err != nil {
				t.Fatal(err)
			}
		}
		sum, cnt, peak = download(t, F32, sb, n), download(t, F32, cb, n), download(t, F32, pb, n)
	}
	assertClose(t, "sums", sum, wantSum, 1e-3, 5e-4)
	assertClose(t, "counts", cnt, wantCnt, 0, 0)
	assertClose(t, "peaks", peak, wantPeak, 2e-4, 1e-4)
}

// TestAttentionStatsAccRefusals: batch 2, a weight that is not positive
// and finite, and short totals are errors on both devices.
func TestAttentionStatsAccRefusals(t *testing.T) {
	p := AttentionParams{Batch: 1, Heads: 2, KVHeads: 1, SeqQ: 1, SeqKV: 9, HeadDim: 4, Scale: 0.5}
	q, k, lse := alloc(t, F32, 8), alloc(t, F32, 36), alloc(t, F32, 2)
	ok, short := alloc(t, F32, 9), alloc(t, F32, 7) // alloc leaves one spare element
	b2 := p
	b2.Batch = 2
	hq, hk, hl := Buf{Host: make([]byte, 4*8)}, Buf{Host: make([]byte, 4*36)}, Buf{Host: make([]byte, 4*2)}
	hok, hshort := Buf{Host: make([]byte, 4*9)}, Buf{Host: make([]byte, 4*8)}
	hd := &HostDevice{}
	for _, c := range []struct {
		name string
		p    AttentionParams
		w    float32
		dst  Buf
		hdst Buf
	}{
		{"batch 2", b2, 1, ok, hok},
		{"weight 0", p, 0, ok, hok},
		{"weight -1", p, -1, ok, hok},
		{"weight NaN", p, float32(math.NaN()), ok, hok},
		{"weight +Inf", p, float32(math.Inf(1)), ok, hok},
		{"short sums", p, 1, short, hshort},
	} {
		if err := testLib.AttentionStatsAcc(F32, q, k, lse, c.dst, ok, ok, c.p, c.w, true); err == nil {
			t.Errorf("opencl: %s: no error", c.name)
		}
		if err := hd.AttentionStatsAcc(F32, hq, hk, hl, c.hdst, hok, hok, c.p, c.w, true); err == nil {
			t.Errorf("go: %s: no error", c.name)
		}
	}
	// Short peaks alone.
	if err := testLib.AttentionStatsAcc(F32, q, k, lse, ok, ok, short, p, 1, true); err == nil {
		t.Error("opencl: short peaks: no error")
	}
	if err := hd.AttentionStatsAcc(F32, hq, hk, hl, hok, hok, hshort, p, 1, true); err == nil {
		t.Error("go: short peaks: no error")
	}
}
