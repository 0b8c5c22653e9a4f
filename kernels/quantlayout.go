package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/quant"
)

// QLayout is the order of a packed 4-bit weight's codes and parameters in
// device memory. The engine asks the device for its layout (QuantLayout)
// when it loads a model and repacks each packed weight once, so that the
// decode kernels' neighbouring work-items read neighbouring bytes.
type QLayout int

const (
	// QLayoutColumns is graph/quant's own order: each output column's code
	// words in a run of K/8, its group parameter pairs in a run of
	// 2*K/Group. A work-item per column (the CPU kernels) reads its own run.
	QLayoutColumns QLayout = iota
	// QLayoutTile4 takes columns in blocks of four (the last block padded
	// with zero columns): block b holds, for each 32-weight chunk e of the
	// column (code words 4e..4e+3), the four columns' four words in turn,
	// then its parameters as, per group, the four columns' pairs in turn.
	// A work-group of lanes along K then reads one contiguous 64-byte run
	// per lane, neighbouring lanes neighbouring runs, and each activation
	// it loads serves four columns (quant.cl's qmt kernels). The active
	// corner [K', N'] of an elastic sub-model is still a prefix of each
	// block, so nothing is repacked for it.
	QLayoutTile4
)

// qtLanes is the work-group size of the tiled kernels (quant.cl's QTL).
const qtLanes = 64

func (q QLayout) String() string {
	switch q {
	case QLayoutColumns:
		return "columns"
	case QLayoutTile4:
		return "tile4"
	}
	return fmt.Sprintf("QLayout(%d)", int(q))
}

// QuantLayout is the layout the device's 4-bit kernels read fastest:
// QLayoutTile4 on GPUs (a work-group per four columns, lanes along K),
// QLayoutColumns on CPUs (a work-item per column with wide vectors).
func (l *Lib) QuantLayout() QLayout {
	if l.info().Type == "GPU" {
		return QLayoutTile4
	}
	return QLayoutColumns
}

// QuantLayout is QLayoutColumns: the reference reads graph/quant's order,
// and a tiled weight is unpacked first.
func (h *HostDevice) QuantLayout() QLayout { return QLayoutColumns }

// qTile4Sizes are the word and parameter counts of p in QLayoutTile4.
func qTile4Sizes(k, n, group int) (words, params int) {
	blocks := (n + 3) / 4
	return blocks * 4 * (k / 8), blocks * 8 * (k / group)
}

// RepackQTile4 returns p's codes and parameters in QLayoutTile4. p must be
// valid (quant.Packed.Validate).
func RepackQTile4(p *quant.Packed) (words []uint32, params []float32) {
	nw, np := qTile4Sizes(p.K, p.N, p.Group)
	words, params = make([]uint32, nw), make([]float32, np)
	chunks, groups := p.K/32, p.K/p.Group
	for n := 0; n < p.N; n++ {
		b, c := n/4, n%4
		src := p.Words[n*(p.K/8) : (n+1)*(p.K/8)]
		dst := words[b*16*chunks:]
		for e := 0; e < chunks; e++ {
			copy(dst[16*e+4*c:16*e+4*c+4], src[4*e:4*e+4])
		}
		ps := p.Params[n*2*groups : (n+1)*2*groups]
		pd := params[b*8*groups:]
		for g := 0; g < groups; g++ {
			pd[8*g+2*c], pd[8*g+2*c+1] = ps[2*g], ps[2*g+1]
		}
	}
	return words, params
}

// UnpackQTile4 is RepackQTile4's inverse: the [k, n] weight in groups of
// group whose tiled arrays are words and params, in graph/quant's order.
func UnpackQTile4(f quant.Format, group, k, n int, words []uint32, params []float32) (*quant.Packed, error) {
	if group <= 0 || group%32 != 0 || k <= 0 || n <= 0 || k%group != 0 {
		return nil, fmt.Errorf("kernels: UnpackQTile4: weight [%d, %d] in groups of %d", k, n, group)
	}
	nw, np := qTile4Sizes(k, n, group)
	if len(words) < nw || len(params) < np {
		return nil, fmt.Errorf("kernels: UnpackQTile4: [%d, %d] in groups of %d needs %d words and %d parameters, have %d and %d",
			k, n, group, nw, np, len(words), len(params))
	}
	chunks, groups := k/32, k/group
	p := &quant.Packed{Format: f, Group: group, K: k, N: n,
		Words: make([]uint32, n*(k/8)), Params: make([]float32, n*2*groups)}
	for col := 0; col < n; col++ {
		b, c := col/4, col%4
		for e := 0; e < chunks; e++ {
			copy(p.Words[col*(k/8)+4*e:], words[b*16*chunks+16*e+4*c:b*16*chunks+16*e+4*c+4])
		}
		for g := 0; g < groups; g++ {
			p.Params[col*2*groups+2*g] = params[b*8*groups+8*g+2*c]
			p.Params[col*2*groups+2*g+1] = params[b*8*groups+8*g+2*c+1]
		}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("kernels: UnpackQTile4: %w", err)
	}
	return p, nil
}

// QLayoutBytes is words then params as little-endian bytes: the contents
// of a packed weight's device buffer, codes at word 0 and parameters at
// word len(words).
func QLayoutBytes(words []uint32, params []float32) []byte {
	raw := make([]byte, 4*(len(words)+len(params)))
	for i, w := range words {
		binary.LittleEndian.PutUint32(raw[4*i:], w)
	}
	base := 4 * len(words)
	for i, v := range params {
		binary.LittleEndian.PutUint32(raw[base+4*i:], math.Float32bits(v))
	}
	return raw
}
