package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/memplan"
)

// WeightPlacement says how Open puts a model's constants (weights) on the
// device.
type WeightPlacement int

const (
	// WeightsAuto uses weights in place on devices that share host memory
	// (kernels.ConstPlacer.SharesHostMemory: PoCL's CPU device, phone GPUs
	// reporting CL_DEVICE_HOST_UNIFIED_MEMORY) and copies them to the
	// device everywhere else. $TLITE_WEIGHTS ("inplace" or "copy")
	// overrides the choice.
	WeightsAuto WeightPlacement = iota
	// WeightsInPlace hands file-mapped weights to the device as they lie in
	// the mapping (CL_MEM_USE_HOST_PTR), where their address is aligned
	// well enough; the rest are written once into host-visible device
	// memory (CL_MEM_ALLOC_HOST_PTR).
	WeightsInPlace
	// WeightsCopy copies every weight into device memory, as a discrete
	// GPU needs.
	WeightsCopy
)

// String names the placement as $TLITE_WEIGHTS spells it.
func (w WeightPlacement) String() string {
	switch w {
	case WeightsAuto:
		return "auto"
	case WeightsInPlace:
		return "inplace"
	case WeightsCopy:
		return "copy"
	}
	return fmt.Sprintf("WeightPlacement(%d)", int(w))
}

// ParseWeightPlacement reads "auto", "inplace" or "copy".
func ParseWeightPlacement(s string) (WeightPlacement, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return WeightsAuto, nil
	case "inplace", "in-place", "mapped":
		return WeightsInPlace, nil
	case "copy":
		return WeightsCopy, nil
	}
	return 0, fmt.Errorf("weight placement %q: want auto, inplace or copy", s)
}

// WeightStats says where Open put the session's constants.
type WeightStats struct {
	// Placement is the placement in effect (never WeightsAuto).
	Placement WeightPlacement
	// InPlace are the bytes the device reads straight from the model's
	// file mapping (no copy at all).
	InPlace int64
	// Copied are the bytes written into device buffers: derived weights
	// (transposed at Open), converted ones (fp16 storage), constants not
	// mapped from the file or not aligned for in-place use, and all of
	// them under WeightsCopy.
	Copied int64
	// Views and Buffers count the constants of each kind.
	Views, Buffers int
}

// WeightStats reports where Open put the session's constants.
func (s *Session) WeightStats() WeightStats { return s.wstats }

// weightPlacement resolves opts.Weights against $TLITE_WEIGHTS and the
// device.
func (s *Session) weightPlacement(w WeightPlacement) (WeightPlacement, error) {
	if w == WeightsAuto {
		if env := os.Getenv("TLITE_WEIGHTS"); env != "" {
			var err error
			if w, err = ParseWeightPlacement(env); err != nil {
				return 0, fmt.Errorf("engine: $TLITE_WEIGHTS: %w", err)
			}
		}
	}
	if w != WeightsAuto {
		return w, nil
	}
	if p, ok := s.dev.(kernels.ConstPlacer); ok && p.SharesHostMemory() {
		return WeightsInPlace, nil
	}
	return WeightsCopy, nil
}

// widenMin is the least element count of a float16 initializer whose
// widening to the engine's float32 host layout waits for the upload
// (deferWiden). Smaller ones (scalars, shapes, norms' parameters) are
// widened at once: lowerings read such constants' values on the host.
const widenMin = 4096

// deferWiden sets vi up as a float16 initializer t whose float32 contents
// are computed at upload, straight into the device buffer (vinfo.derive),
// instead of being kept on the Go heap for the session beside the device's
// copy; it reports whether it did. Host readers widen it on demand
// (materialize).
func deferWiden(vi *vinfo, t *graph.Tensor) bool {
	if t.Type != dtype.Float16 || t.NumElements() < widenMin || t.Data == nil {
		return false
	}
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	n := numel(shape)
	src := t.Data
	if len(src) != 2*n {
		return false // hostFromGraph reports the size mismatch
	}
	vi.konst = &hostTensor{dt: dtype.Float16, shape: shape}
	vi.derive = func(dst []byte) error {
		le := binary.LittleEndian
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], math.Float32bits(dtype.HalfToFloat32(le.Uint16(src[2*i:]))))
		}
		return nil
	}
	vi.derivedFrom = src
	return true
}

// materialize computes a derived constant's contents on the host, for the
// rare host-side reader of one (device steps get it from the upload).
func (r *vinfo) materialize() error {
	if r.derive == nil || r.konst == nil || r.konst.data != nil {
		return nil
	}
	data := make([]byte, hostSize(r.konst.dt)*numel(r.konst.shape))
	if err := r.derive(data); err != nil {
		return fmt.Errorf("constant %s: %w", r.name, err)
	}
	r.konst.data = data
	return nil
}

// uploadConst puts constant r on the device in storage et. Bytes the
// model maps from its file are used in place under WeightsInPlace when the
// device takes them; everything else is written once, straight into the
// buffer (derived weights are computed into it). Afterwards the mapped
// source pages are dropped from the resident set, so the copy on the device
// is the only one counted.
func (s *Session) uploadConst(r *vinfo, et kernels.ElemType) (*buffer, int, error) {
	h := r.konst
	n := numel(h.shape)
	convert := et == kernels.EF16 && (h.dt == dtype.Float32 || h.dt == dtype.Float16)
	// The same byte counts toStorage gives.
	size, src := len(h.data), h.data
	if r.derive != nil && h.data == nil {
		size, src = n*hostSize(h.dt), r.derivedFrom
	}
	if convert {
		size = 2 * n
	}
	placer, _ := s.dev.(kernels.ConstPlacer)
	if s.wstats.Placement == WeightsInPlace && placer != nil && r.derive == nil && !convert &&
		len(h.data) == size && size > 0 && s.model.Mapped(h.data) {
		m, ok, err := placer.AllocView(h.data)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			s.wstats.InPlace += int64(size)
			s.wstats.Views++
			return &buffer{m: m, size: size}, size, nil
		}
	}
	fill := func(dst []byte) error {
		switch {
		case r.derive != nil && h.data == nil && !convert:
			return r.derive(dst[:size])
		case convert:
			if err := r.materialize(); err != nil {
				return err
			}
			copy(dst, toStorage(h, et))
		default:
			copy(dst, h.data)
		}
		return nil
	}
	alloc := max(size, 64)
	var b *buffer
	if placer != nil {
		m, err := placer.AllocFilled(alloc, fill)
		if err != nil {
			return nil, 0, err
		}
		b = &buffer{m: m, size: alloc}
	} else {
		var err error
		if b, err = allocBuffer(s.dev, alloc); err != nil {
			return nil, 0, err
		}
		if host := b.host(); host != nil {
			err = fill(host)
		} else {
			tmp := make([]byte, size)
			if err = fill(tmp); err == nil {
				err = s.dev.Write(b.m, 0, tmp)
			}
		}
		if err != nil {
			s.dev.Release(b.m)
			return nil, 0, err
		}
	}
	s.wstats.Copied += int64(size)
	s.wstats.Buffers++
	if r.derive != nil && h.data != nil && convert {
		h.data = nil // the converted upload was the reason to compute it
	}
	for _, p := range append([][]byte{src}, r.derivedParts...) {
		if err := s.model.DropPages(p); err != nil {
			return nil, 0, fmt.Errorf("dropping the pages of %s (%s) after its upload: %w", r.name, memplan.Bytes(int64(size)), err)
		}
	}
	return b, size, nil
}
