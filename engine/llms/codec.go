package llms

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// Level is a chunk's storage precision. Lower levels are heavier
// compression; a chunk's level may move down (compress more) but never up,
// since the precision is gone.
type Level int

// The levels. LevelFP stores the cache buffer's own bytes (lossless: the
// exactness tests and the uncompressed VLLM-S baseline use it); the
// others are the paper's 8/8, 4/8 and 2/8 of the base INT8.
const (
	Level2  Level = 2
	Level4  Level = 4
	Level8  Level = 8
	LevelFP Level = 32
)

// String names the level as reports do ("int8", "int4", "int2", "fp").
func (l Level) String() string {
	switch l {
	case Level2:
		return "int2"
	case Level4:
		return "int4"
	case Level8:
		return "int8"
	case LevelFP:
		return "fp"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// Ratio is the level's nominal fraction of the base INT8 (ratio_w of
// Eq. 2-3): 8/8, 4/8, 2/8; LevelFP counts as 8/8 (it is outside the
// paper's ladder).
func (l Level) Ratio() float64 {
	if l == LevelFP {
		return 1
	}
	return float64(l) / 8
}

func (l Level) valid() bool {
	return l == Level2 || l == Level4 || l == Level8 || l == LevelFP
}

// Shape is one cache buffer's row: KV heads x head dim elements of ElemSize
// bytes (4 for fp32 storage, 2 for fp16).
type Shape struct {
	Heads, Dim, ElemSize int
}

func (s Shape) rowElems() int { return s.Heads * s.Dim }

// EncodedSize is the exact number of bytes a chunk of n tokens of one
// cache buffer takes at level l, metadata included:
//
//	LevelFP: n·H·D·ElemSize (the buffer's own bytes)
//	Level8:  n·H·(D + 4): per token and KV head, D one-byte codes and an
//	         fp16 scale and fp16 zero point (base INT8, asymmetric min/max)
//	Level4/2: H·D·(4 + ceil(n·bits/8)): per channel (KV head, dim), an fp16
//	         scale and zero over the chunk's n tokens and n packed codes.
func EncodedSize(l Level, n int, s Shape) int {
	switch l {
	case LevelFP:
		return n * s.rowElems() * s.ElemSize
	case Level8:
		return n * s.Heads * (s.Dim + 4)
	case Level4, Level2:
		return s.rowElems() * (4 + (n*int(l)+7)/8)
	}
	return 0
}

// EffectiveBits is the stored bits per cached value of a chunk of n tokens
// at level l, metadata included (16 tokens of 2-bit codes with an fp16
// scale and zero per channel are 4 bits, not 2).
func EffectiveBits(l Level, n int, s Shape) float64 {
	if n == 0 || s.rowElems() == 0 {
		return 0
	}
	return float64(8*EncodedSize(l, n, s)) / float64(n*s.rowElems())
}

// readRows converts n rows of raw cache bytes (store type) to float32.
func readRows(raw []byte, n int, s Shape, dst []float32) error {
	m := n * s.rowElems()
	if len(raw) != m*s.ElemSize || len(dst) < m {
		return fmt.Errorf("llms: %d bytes for %d rows of %d elements of %d bytes", len(raw), n, s.rowElems(), s.ElemSize)
	}
	switch s.ElemSize {
	case 4:
		for i := 0; i < m; i++ {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case 2:
		for i := 0; i < m; i++ {
			dst[i] = dtype.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	default:
		return fmt.Errorf("llms: cache element size %d; want 4 (fp32) or 2 (fp16)", s.ElemSize)
	}
	return nil
}

// writeRows converts float32 values back to the store type.
func writeRows(src []float32, s Shape, raw []byte) error {
	switch s.ElemSize {
	case 4:
		for i, v := range src {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	case 2:
		for i, v := range src {
			binary.LittleEndian.PutUint16(raw[2*i:], dtype.Float32ToHalf(v))
		}
	default:
		return fmt.Errorf("llms: cache element size %d; want 4 (fp32) or 2 (fp16)", s.ElemSize)
	}
	return nil
}

// quantParams returns fp16-rounded scale and zero for values in [lo, hi]
// at bits, and the float32 values the codes decode with (the rounded
// ones, so encoder and decoder agree).
func quantParams(lo, hi float32, bits int) (sh, zh uint16, scale, zero float32) {
	zh = dtype.Float32ToHalf(lo)
	zero = dtype.HalfToFloat32(zh)
	levels := float32(int(1)<<bits - 1)
	s := (hi - zero) / levels
	if !(s > 0) || math.IsInf(float64(s), 0) {
		s = 0
	}
	sh = dtype.Float32ToHalf(s)
	scale = dtype.HalfToFloat32(sh)
	if scale > 0 && zero+scale*levels < hi {
		// fp16 rounded the scale down: step it up one ulp so the top code
		// still reaches the maximum.
		sh++
		scale = dtype.HalfToFloat32(sh)
	}
	return sh, zh, scale, zero
}

func quantize(v, scale, zero float32, maxCode int) int {
	if scale == 0 {
		return 0
	}
	c := int(math.Round(float64((v - zero) / scale)))
	return min(max(c, 0), maxCode)
}

// EncodeChunk encodes n rows (tokens) of one cache buffer, given as raw
// store bytes (n·H·D·ElemSize), at level l, appending to dst. Levels 4 and
// 2 are quantized from the base INT8's dequantized values, as the paper
// compresses "atop" the base quantization.
func EncodeChunk(dst []byte, raw []byte, n int, s Shape, l Level) ([]byte, error) {
	if !l.valid() {
		return nil, fmt.Errorf("llms: encode at unknown level %d", int(l))
	}
	if l == LevelFP {
		if len(raw) != n*s.rowElems()*s.ElemSize {
			return nil, fmt.Errorf("llms: %d bytes for %d rows of %d elements of %d bytes", len(raw), n, s.rowElems(), s.ElemSize)
		}
		return append(dst, raw...), nil
	}
	vals := make([]float32, n*s.rowElems())
	if err := readRows(raw, n, s, vals); err != nil {
		return nil, err
	}
	return encodeValues(dst, vals, n, s, l)
}

// encodeValues is EncodeChunk on float32 values ([n][H][D]).
func encodeValues(dst []byte, vals []float32, n int, s Shape, l Level) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, EncodedSize(l, n, s))...)
	out := dst[start:]
	H, D := s.Heads, s.Dim
	switch l {
	case LevelFP:
		if err := writeRows(vals, s, out); err != nil {
			return nil, err
		}
		return dst, nil
	case Level8:
		encode8(out, vals, n, H, D)
		return dst, nil
	}
	// Channel-wise, atop the base INT8.
	base := make([]byte, EncodedSize(Level8, n, s))
	encode8(base, vals, n, H, D)
	deq := make([]float32, len(vals))
	decode8(deq, base, n, H, D)
	bits := int(l)
	maxCode := 1<<bits - 1
	perByte := 8 / bits
	cb := (n*bits + 7) / 8
	meta := out[:4*H*D]
	codes := out[4*H*D:]
	for c := 0; c < H*D; c++ {
		lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
		for t := 0; t < n; t++ {
			v := deq[t*H*D+c]
			lo, hi = min(lo, v), max(hi, v)
		}
		sh, zh, scale, zero := quantParams(lo, hi, bits)
		binary.LittleEndian.PutUint16(meta[4*c:], sh)
		binary.LittleEndian.PutUint16(meta[4*c+2:], zh)
		ch := codes[c*cb : (c+1)*cb]
		for t := 0; t < n; t++ {
			q := quantize(deq[t*H*D+c], scale, zero, maxCode)
			ch[t/perByte] |= byte(q << (bits * (t % perByte)))
		}
	}
	return dst, nil
}

func encode8(out []byte, vals []float32, n, H, D int) {
	for t := 0; t < n; t++ {
		for h := 0; h < H; h++ {
			row := vals[(t*H+h)*D : (t*H+h+1)*D]
			lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
			for _, v := range row {
				lo, hi = min(lo, v), max(hi, v)
			}
			sh, zh, scale, zero := quantParams(lo, hi, 8)
			o := out[(t*H+h)*(D+4):]
			binary.LittleEndian.PutUint16(o, sh)
			binary.LittleEndian.PutUint16(o[2:], zh)
			for d, v := range row {
				o[4+d] = byte(quantize(v, scale, zero, 255))
			}
		}
	}
}

func decode8(dst []float32, in []byte, n, H, D int) {
	for t := 0; t < n; t++ {
		for h := 0; h < H; h++ {
			o := in[(t*H+h)*(D+4):]
			scale := dtype.HalfToFloat32(binary.LittleEndian.Uint16(o))
			zero := dtype.HalfToFloat32(binary.LittleEndian.Uint16(o[2:]))
			row := dst[(t*H+h)*D : (t*H+h+1)*D]
			for d := range row {
				row[d] = zero + scale*float32(o[4+d])
			}
		}
	}
}

// DecodeChunk decodes a chunk of n tokens of one cache buffer encoded at
// level l into raw store bytes (n·H·D·ElemSize), appending to dst. It
// writes the store type directly (no intermediate float slice): the
// switch's upload decodes every resident chunk.
func DecodeChunk(dst []byte, enc []byte, n int, s Shape, l Level) ([]byte, error) {
	if !l.valid() {
		return nil, fmt.Errorf("llms: decode at unknown level %d", int(l))
	}
	if len(enc) != EncodedSize(l, n, s) {
		return nil, fmt.Errorf("llms: %s chunk of %d tokens is %d bytes; want %d", l, n, len(enc), EncodedSize(l, n, s))
	}
	if s.ElemSize != 4 && s.ElemSize != 2 {
		return nil, fmt.Errorf("llms: cache element size %d; want 4 (fp32) or 2 (fp16)", s.ElemSize)
	}
	if l == LevelFP {
		return append(dst, enc...), nil
	}
	start := len(dst)
	size := n * s.rowElems() * s.ElemSize
	if cap(dst)-start >= size {
		dst = dst[:start+size]
	} else {
		dst = append(dst, make([]byte, size)...)
	}
	out := dst[start:]
	H, D := s.Heads, s.Dim
	put := func(i int, v float32) {
		if s.ElemSize == 4 {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		} else {
			binary.LittleEndian.PutUint16(out[2*i:], dtype.Float32ToHalf(v))
		}
	}
	if l == Level8 {
		for r := 0; r < n*H; r++ {
			o := enc[r*(D+4) : (r+1)*(D+4)]
			scale := dtype.HalfToFloat32(binary.LittleEndian.Uint16(o))
			zero := dtype.HalfToFloat32(binary.LittleEndian.Uint16(o[2:]))
			codes := o[4:]
			if s.ElemSize == 4 {
				row := out[4*r*D : 4*(r+1)*D]
				for d, q := range codes {
					binary.LittleEndian.PutUint32(row[4*d:], math.Float32bits(zero+scale*float32(q)))
				}
				continue
			}
			for d, q := range codes {
				put(r*D+d, zero+scale*float32(q))
			}
		}
		return dst, nil
	}
	bits := int(l)
	mask := 1<<bits - 1
	perByte := 8 / bits
	cb := (n*bits + 7) / 8
	meta := enc[:4*H*D]
	codes := enc[4*H*D:]
	var lut [16]float32
	for c := 0; c < H*D; c++ {
		scale := dtype.HalfToFloat32(binary.LittleEndian.Uint16(meta[4*c:]))
		zero := dtype.HalfToFloat32(binary.LittleEndian.Uint16(meta[4*c+2:]))
		for q := 0; q <= mask; q++ {
			lut[q] = zero + scale*float32(q)
		}
		ch := codes[c*cb : (c+1)*cb]
		if s.ElemSize == 4 {
			stride := 4 * H * D
			o := 4 * c
			for t := 0; t < n; t++ {
				q := int(ch[t/perByte]>>(bits*(t%perByte))) & mask
				binary.LittleEndian.PutUint32(out[o:], math.Float32bits(lut[q]))
				o += stride
			}
			continue
		}
		for t := 0; t < n; t++ {
			q := int(ch[t/perByte]>>(bits*(t%perByte))) & mask
			put(t*H*D+c, lut[q])
		}
	}
	return dst, nil
}

// decodeValues decodes to float32 values [n][H][D].
func decodeValues(enc []byte, n int, s Shape, l Level) ([]float32, error) {
	H, D := s.Heads, s.Dim
	vals := make([]float32, n*H*D)
	switch l {
	case LevelFP:
		if err := readRows(enc, n, s, vals); err != nil {
			return nil, err
		}
		return vals, nil
	case Level8:
		decode8(vals, enc, n, H, D)
		return vals, nil
	}
	bits := int(l)
	mask := 1<<bits - 1
	perByte := 8 / bits
	cb := (n*bits + 7) / 8
	meta := enc[:4*H*D]
	codes := enc[4*H*D:]
	for c := 0; c < H*D; c++ {
		scale := dtype.HalfToFloat32(binary.LittleEndian.Uint16(meta[4*c:]))
		zero := dtype.HalfToFloat32(binary.LittleEndian.Uint16(meta[4*c+2:]))
		ch := codes[c*cb : (c+1)*cb]
		for t := 0; t < n; t++ {
			q := int(ch[t/perByte]>>(bits*(t%perByte))) & mask
			vals[t*H*D+c] = zero + scale*float32(q)
		}
	}
	return vals, nil
}
