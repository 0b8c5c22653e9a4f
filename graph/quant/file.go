package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// HeaderSize is the size of the header MarshalBinary writes; both arrays
// that follow start on 64-byte boundaries of the encoding.
const HeaderSize = 64

// Magic starts every encoded packed weight.
const Magic = "TLQ4"

// Version is the encoding version MarshalBinary writes.
const Version = 1

// Header is the fixed part of an encoded packed weight, all fields
// little-endian:
//
//	offset size field
//	0      4    magic "TLQ4"
//	4      4    version (1)
//	8      4    format (1 = E0M4, 2 = INT4)
//	12     4    group size G
//	16     4    K (input features)
//	20     4    N (output features)
//	24     8    byte offset of Words (uint32[N*K/8]), a multiple of 64
//	32     8    byte offset of Params (float32[N*(K/G)*2]), a multiple of 64
//	40     8    total encoded size in bytes
//	48     16   zero
//
// A reader that maps the file can hand Words and Params to the device
// straight from those offsets.
type Header struct {
	Format       Format
	Group, K, N  int
	WordsOffset  int64
	ParamsOffset int64
	Size         int64
}

func align64(n int64) int64 { return (n + 63) &^ 63 }

// headerFor returns the header of a packed weight of format f, group g and
// shape [k, n], whose sizes are already validated.
func headerFor(f Format, g, k, n int) Header {
	words := int64(n) * int64(k) / 8
	params := int64(n) * 2 * int64(k/g)
	wo := int64(HeaderSize)
	po := align64(wo + 4*words)
	return Header{Format: f, Group: g, K: k, N: n,
		WordsOffset: wo, ParamsOffset: po, Size: align64(po + 4*params)}
}

// MarshalBinary encodes p as Header describes.
func (p *Packed) MarshalBinary() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	h := headerFor(p.Format, p.Group, p.K, p.N)
	b := make([]byte, h.Size)
	copy(b, Magic)
	le := binary.LittleEndian
	le.PutUint32(b[4:], Version)
	le.PutUint32(b[8:], uint32(h.Format))
	le.PutUint32(b[12:], uint32(h.Group))
	le.PutUint32(b[16:], uint32(h.K))
	le.PutUint32(b[20:], uint32(h.N))
	le.PutUint64(b[24:], uint64(h.WordsOffset))
	le.PutUint64(b[32:], uint64(h.ParamsOffset))
	le.PutUint64(b[40:], uint64(h.Size))
	for i, w := range p.Words {
		le.PutUint32(b[h.WordsOffset+4*int64(i):], w)
	}
	for i, v := range p.Params {
		le.PutUint32(b[h.ParamsOffset+4*int64(i):], math.Float32bits(v))
	}
	return b, nil
}

// ParseHeader reads and checks the header of an encoded packed weight of
// len(b) bytes (b may be just the first HeaderSize bytes when size says the
// rest is there).
func ParseHeader(b []byte, size int64) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("quant: packed weight: %d bytes, shorter than the %d-byte header", len(b), HeaderSize)
	}
	if string(b[:4]) != Magic {
		return Header{}, fmt.Errorf("quant: packed weight: magic %q, want %q", b[:4], Magic)
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[4:]); v != Version {
		return Header{}, fmt.Errorf("quant: packed weight: version %d, this build reads version %d", v, Version)
	}
	h := Header{Format: Format(le.Uint32(b[8:])), Group: int(le.Uint32(b[12:])),
		K: int(le.Uint32(b[16:])), N: int(le.Uint32(b[20:])),
		WordsOffset: int64(le.Uint64(b[24:])), ParamsOffset: int64(le.Uint64(b[32:])), Size: int64(le.Uint64(b[40:]))}
	if !h.Format.FourBit() {
		return Header{}, fmt.Errorf("quant: packed weight: unknown format %d", uint32(h.Format))
	}
	if h.K <= 0 || h.N <= 0 {
		return Header{}, fmt.Errorf("quant: packed weight: shape [%d, %d] is not positive", h.K, h.N)
	}
	if err := checkGroup(h.Group, h.K); err != nil {
		return Header{}, fmt.Errorf("quant: packed weight [%d, %d]: %w", h.K, h.N, err)
	}
	if int64(h.K)*int64(h.N) > math.MaxInt32*8 {
		return Header{}, fmt.Errorf("quant: packed weight: shape [%d, %d] is too large", h.K, h.N)
	}
	if w := headerFor(h.Format, h.Group, h.K, h.N); w != h {
		return Header{}, fmt.Errorf("quant: packed weight [%d, %d]: layout %+v does not match the expected %+v", h.K, h.N, h, w)
	}
	if size != h.Size {
		return Header{}, fmt.Errorf("quant: packed weight [%d, %d]: %d bytes, header says %d", h.K, h.N, size, h.Size)
	}
	return h, nil
}

// UnmarshalPacked decodes an encoding written by MarshalBinary into a
// Packed that owns copies of the arrays.
func UnmarshalPacked(b []byte) (*Packed, error) {
	h, err := ParseHeader(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	p := &Packed{Format: h.Format, Group: h.Group, K: h.K, N: h.N,
		Words: make([]uint32, h.N*h.K/8), Params: make([]float32, h.N*2*(h.K/h.Group))}
	le := binary.LittleEndian
	for i := range p.Words {
		p.Words[i] = le.Uint32(b[h.WordsOffset+4*int64(i):])
	}
	for i := range p.Params {
		p.Params[i] = math.Float32frombits(le.Uint32(b[h.ParamsOffset+4*int64(i):]))
	}
	return p, nil
}

// HeaderOf returns the header MarshalBinary writes for a packed weight of
// format f, group g and shape [k, n] (its Size is the encoding's length),
// or an error when that shape and group cannot be packed.
func HeaderOf(f Format, g, k, n int) (Header, error) {
	if !f.FourBit() {
		return Header{}, fmt.Errorf("quant: format %v is not a packed 4-bit format", f)
	}
	if k <= 0 || n <= 0 || int64(k)*int64(n) > math.MaxInt32*8 {
		return Header{}, fmt.Errorf("quant: packed weight shape [%d, %d] is not positive or too large", k, n)
	}
	if err := checkGroup(g, k); err != nil {
		return Header{}, fmt.Errorf("quant: packed weight [%d, %d]: %w", k, n, err)
	}
	return headerFor(f, g, k, n), nil
}

// Concat joins packed weights of one format, group and K along N: the
// result's columns are ps[0]'s, then ps[1]'s, and so on. Columns are
// stored one after another (codes and parameters alike), so this is a
// concatenation of the arrays.
func Concat(ps ...*Packed) (*Packed, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("quant: Concat of no weights")
	}
	out := &Packed{Format: ps[0].Format, Group: ps[0].Group, K: ps[0].K}
	for i, p := range ps {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("quant: Concat: weight %d: %w", i, err)
		}
		if p.Format != out.Format || p.Group != out.Group || p.K != out.K {
			return nil, fmt.Errorf("quant: Concat: weight %d is %v, group %d, K %d; weight 0 is %v, group %d, K %d",
				i, p.Format, p.Group, p.K, out.Format, out.Group, out.K)
		}
		out.N += p.N
		out.Words = append(out.Words, p.Words...)
		out.Params = append(out.Params, p.Params...)
	}
	return out, nil
}

// ConcatEncoded writes into dst the encoding of the weights srcs encode
// (each as MarshalBinary writes it) joined along N as Concat joins them,
// straight from their bytes: no decoded copy is made, so a loader can
// join weights that a file maps into a device buffer with nothing on the
// heap. dst must hold exactly the joined encoding (HeaderOf(...).Size).
func ConcatEncoded(dst []byte, srcs ...[]byte) error {
	if len(srcs) == 0 {
		return fmt.Errorf("quant: ConcatEncoded of no weights")
	}
	hs := make([]Header, len(srcs))
	n := 0
	for i, src := range srcs {
		h, err := ParseHeader(src, int64(len(src)))
		if err != nil {
			return fmt.Errorf("quant: ConcatEncoded: weight %d: %w", i, err)
		}
		if i > 0 && (h.Format != hs[0].Format || h.Group != hs[0].Group || h.K != hs[0].K) {
			return fmt.Errorf("quant: ConcatEncoded: weight %d is %v, group %d, K %d; weight 0 is %v, group %d, K %d",
				i, h.Format, h.Group, h.K, hs[0].Format, hs[0].Group, hs[0].K)
		}
		hs[i] = h
		n += h.N
	}
	j, err := HeaderOf(hs[0].Format, hs[0].Group, hs[0].K, n)
	if err != nil {
		return err
	}
	if int64(len(dst)) != j.Size {
		return fmt.Errorf("quant: ConcatEncoded: %d bytes for a joined encoding of %d", len(dst), j.Size)
	}
	clear(dst)
	copy(dst, srcs[0][:HeaderSize])
	le := binary.LittleEndian
	le.PutUint32(dst[20:], uint32(j.N))
	le.PutUint64(dst[24:], uint64(j.WordsOffset))
	le.PutUint64(dst[32:], uint64(j.ParamsOffset))
	le.PutUint64(dst[40:], uint64(j.Size))
	wo, po := j.WordsOffset, j.ParamsOffset
	for i, src := range srcs {
		h := hs[i]
		words := 4 * int64(h.N) * int64(h.K/8)
		params := 4 * int64(h.N) * 2 * int64(h.K/h.Group)
		wo += int64(copy(dst[wo:wo+words], src[h.WordsOffset:h.WordsOffset+words]))
		po += int64(copy(dst[po:po+params], src[h.ParamsOffset:h.ParamsOffset+params]))
	}
	return nil
}
