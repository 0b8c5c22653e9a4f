package kernels

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/opencl"
)

func uploadQTile4(t testing.TB, p *quant.Packed) QBuf {
	t.Helper()
	w, err := testLib.uploadQAs(p, QLayoutTile4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Release)
	return w
}

// TestRepackQTile4 checks the tiled layout by hand on one word and
// parameter, its zero padding, and that unpacking gives p back, for
// column counts that do and do not fill the last block.
func TestRepackQTile4(t *testing.T) {
	for _, sh := range []struct{ group, k, n int }{{32, 96, 1}, {128, 384, 5}, {64, 320, 8}, {128, 256, 37}} {
		_, p := qWeight(t, int64(sh.n), quant.E0M4, sh.k, sh.n, sh.group)
		words, params := RepackQTile4(p)
		blocks := (sh.n + 3) / 4
		if len(words) != blocks*4*sh.k/8 || len(params) != blocks*8*sh.k/sh.group {
			t.Fatalf("%v: %d words, %d params", sh, len(words), len(params))
		}
		// Column n's word 4e+j sits at block n/4, chunk e, lane n%4.
		n, e, j := sh.n-1, sh.k/32-1, 3
		if got, want := words[(n/4)*16*(sh.k/32)+16*e+4*(n%4)+j], p.Words[n*sh.k/8+4*e+j]; got != want {
			t.Errorf("%v: tiled word %08x, want %08x", sh, got, want)
		}
		g := sh.k/sh.group - 1
		if got, want := params[(n/4)*8*(sh.k/sh.group)+8*g+2*(n%4)+1], p.Params[n*2*(sh.k/sh.group)+2*g+1]; got != want {
			t.Errorf("%v: tiled parameter %v, want %v", sh, got, want)
		}
		// Padding columns are all zero.
		for c := sh.n; c < 4*blocks; c++ {
			for e := 0; e < sh.k/32; e++ {
				for j := 0; j < 4; j++ {
					if w := words[(c/4)*16*(sh.k/32)+16*e+4*(c%4)+j]; w != 0 {
						t.Fatalf("%v: padding column %d holds %08x", sh, c, w)
					}
				}
			}
		}
		back, err := UnpackQTile4(p.Format, p.Group, p.K, p.N, words, params)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back.Words, p.Words) || !slices.Equal(back.Params, p.Params) {
			t.Errorf("%v: unpacking the tiled layout does not give the weight back", sh)
		}
	}
	if _, err := UnpackQTile4(quant.E0M4, 128, 256, 5, make([]uint32, 10), nil); err == nil || !strings.Contains(err.Error(), "needs") {
		t.Errorf("short arrays: error %v", err)
	}
}

// TestMatMulQTile4 runs the tiled kernel (qmt_r1, a row per work-group)
// against the reference: both formats and storages, N that leaves
// the last block of four partly empty, K an odd number of groups of 32,
// 64 and 128, fewer chunks than lanes and more, bias, padded strides. On PoCL the local-memory reduction and fp32 arithmetic
// run; the subgroup and half paths are compiled by tools/kernelgate.sh.
func TestMatMulQTile4(t *testing.T) {
	shapes := []struct{ group, k, n int }{
		{128, 3 * 128, 37},
		{64, 5 * 64, 9},
		{32, 3 * 32, 5},
		{128, 19 * 128, 6}, // 76 chunks: lanes take one or two
	}
	// One program per (format, group, storage): to keep the builds few,
	// E0M4 runs every group in fp32 storage, both formats run groups of
	// 128 in both storages, and INT4 runs groups of 32 and 64 in fp16
	// storage, so that tools/kernelgate.sh records INT4's half path (under
	// the gpu-fp16 profile) where its group parameters change every chunk
	// and every second chunk, in qmt_r1 (M 1 and 3) and qmt_mm (M 6).
	keep := func(f quant.Format, group int, s Storage) bool {
		switch {
		case group == 128:
			return true
		case f == quant.E0M4:
			return s == F32
		}
		return (group == 32 || group == 64) && s == F16
	}
	for _, f := range qFormats {
		for _, sh := range shapes {
			if !keep(f, sh.group, F32) && !keep(f, sh.group, F16) {
				continue
			}
			_, wp := qWeight(t, int64(sh.k+sh.n), f, sh.k, sh.n, sh.group)
			wq := uploadQTile4(t, wp)
			for _, s := range storages {
				if !keep(f, sh.group, s) {
					continue
				}
				for _, m := range []int{1, 3, 6} {
					name := fmt.Sprintf("%s/G%d/%s/M%dK%dN%d", f, sh.group, s, m, sh.k, sh.n)
					p := QMatMulParams{M: m, N: sh.n, K: sh.k}
					if m == 6 {
						p.LDA, p.LDC = sh.k+3, sh.n+1
					}
					got, want := qRun(t, s, wq, wp, p, m != 3)
					laClose(t, name, s, got, want)
				}
			}
		}
	}
}

// TestMatMulQTile4Prefix: an elastic sub-model's corner of a tiled weight
// gives bit for bit what the columns layout gives for the same corner
// (same kernel sums in the same order are not required; the check is
// against the reference), and the host device reads a tiled weight too.
func TestMatMulQTile4Prefix(t *testing.T) {
	const K, N, K2, N2 = 512, 40, 256, 23
	for _, f := range qFormats {
		_, big := qWeight(t, 41, f, K, N, 128)
		wq := uploadQTile4(t, big)
		for _, m := range []int{1, 2} {
			got, want := qRun(t, F32, wq, big, QMatMulParams{M: m, N: N2, K: K2}, false)
			laClose(t, fmt.Sprintf("%s prefix M%d", f, m), F32, got, want)
		}
		// HostDevice on the same tiled arrays.
		words, params := RepackQTile4(big)
		raw := QLayoutBytes(words, params)
		hq := QBuf{Format: f, Group: 128, Layout: QLayoutTile4, K: K, N: N,
			Q: Buf{Host: raw}, P: Buf{Host: raw, Off: len(words)}}
		h := &HostDevice{}
		a := laRand(7, K2, F32)
		c := devUpload(t, h, make([]float32, N2))
		if err := h.MatMulQ(F32, devUpload(t, h, a), hq, c, QMatMulParams{M: 1, N: N2, K: K2}); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, N2)
		if err := MatMulQRef(a, big, nil, want, QMatMulParams{M: 1, N: N2, K: K2}); err != nil {
			t.Fatal(err)
		}
		if got := devDownload(t, h, c, N2); !slices.Equal(got, want) {
			t.Errorf("%s: host device on the tiled weight gives %v, want %v", f, got[:3], want[:3])
		}
	}
}

// TestQuantLayoutChoice: GPUs (the published phones and NVIDIA) get the
// tiled layout and its kernels, CPUs the columns layout; the tiled build
// asks for subgroups exactly where the extension string has them.
func TestQuantLayoutChoice(t *testing.T) {
	gpu := &Lib{dev: testLib.dev, as: &opencl.Info{Type: "GPU"}}
	cpu := &Lib{dev: testLib.dev, as: &opencl.Info{Type: "CPU"}}
	if gpu.QuantLayout() != QLayoutTile4 || cpu.QuantLayout() != QLayoutColumns {
		t.Fatalf("layouts %v (GPU), %v (CPU)", gpu.QuantLayout(), cpu.QuantLayout())
	}
	tiled := qmm{w: QBuf{Format: quant.E0M4, Group: 128, Layout: QLayoutTile4}, m: 1}
	if name, _, _ := cpu.qpick(tiled); name != "qmt_r1" {
		t.Errorf("tiled decode picks %s", name)
	}
	tiled.m = 3
	if name, rb, _ := cpu.qpick(tiled); name != "qmt_r1" || rb != 1 {
		t.Errorf("3 rows on the tiled layout pick %s with %d rows per work-group", name, rb)
	}
	tiled.m = 5
	if name, rb, cb := cpu.qpick(tiled); name != "qmt_mm" || rb != 4 || cb != 2 {
		t.Errorf("tiled prefill picks %s with %d x %d outputs per work-item, want qmt_mm 4 x 2", name, rb, cb)
	}
	if o := tiled.options(false, true); !strings.Contains(o, "-DQ_SG") {
		t.Errorf("subgroups on: %s", o)
	}
	if o := tiled.options(false, false); strings.Contains(o, "-DQ_SG") {
		t.Errorf("subgroups off: %s", o)
	}
	bad := QBuf{Format: quant.E0M4, Group: 128, Layout: QLayout(7), K: 256, N: 4}
	if _, err := (QMatMulParams{M: 1, N: 4, K: 256}).resolve(bad, false); err == nil || !strings.Contains(err.Error(), "unknown weight layout 7") {
		t.Errorf("bad layout: %v", err)
	}
}
