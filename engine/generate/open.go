package generate

import (
	"errors"
	"fmt"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/graph"
)

// KV cache modes a Decoder runs in.
const (
	// KVInPlace: the session owns the cache and each step writes only the
	// new keys and values into it (engine/kv).
	KVInPlace = "inplace"
	// KVExplicit: the past is fed back from the present outputs, as
	// exported (Explicit).
	KVExplicit = "explicit"
)

// Decoder is a stepper that owns its session, with the KV cache mode in
// effect.
type Decoder struct {
	Stepper
	s *engine.Session
	// Mode is KVInPlace or KVExplicit.
	Mode string
	// Fallback, when Mode is KVExplicit although in-place was asked for,
	// says why the in-place cache could not be used (naming the node).
	Fallback string
	// LayerFallbacks, in mode KVInPlace, has one line per cache tensor
	// that a node cannot read in place (engine.KVInfo.Fallbacks): that
	// tensor is copied into the export's layout every step.
	LayerFallbacks []string
}

// Session is the session the stepper drives.
func (d *Decoder) Session() *engine.Session { return d.s }

// Close closes the session.
func (d *Decoder) Close() error { return d.s.Close() }

// Open opens the decoder at path for one sequence of up to ctx tokens
// (see ContextMaxima; opts.Max entries win) with the in-place KV cache,
// the default for every decoder. When the cache rewrite cannot serve the
// export (engine.KVCacheError, or a rewritten model the host side cannot
// drive) it opens the model with its cache fed back as exported instead
// and says why in Decoder.Fallback: a decoder does not fail because of the
// cache mode. Layers whose cache one node cannot read in place fall back
// alone (Decoder.LayerFallbacks). When the in-place open fails otherwise,
// the explicit open decides, and its error is returned as it is.
func Open(path string, opts engine.Options, ctx int, cfg Config) (*Decoder, error) {
	if ctx <= 0 {
		return nil, fmt.Errorf("generate: a context of %d tokens", ctx)
	}
	m, err := graph.Load(path)
	if err != nil {
		return nil, err
	}
	maxima, err := ContextMaxima(m, ctx, opts.Max)
	m.Close()
	if err != nil {
		return nil, err
	}
	in := opts
	in.Max = maxima
	in.KVCache = &engine.KVConfig{MaxContext: ctx, AttentionStats: cfg.AttentionStats}
	if cfg.LastOnly {
		// Nothing reads the other rows: skip the LM head over them.
		in.LastLogits = true
	}
	s, err := engine.Open(path, in)
	var why error
	var kerr *engine.KVCacheError
	switch {
	case err == nil:
		p, err := kv.NewStepper(s)
		if err == nil {
			p.LastOnly = cfg.LastOnly
			info, _ := s.KVInfo()
			return &Decoder{Stepper: p, s: s, Mode: KVInPlace, LayerFallbacks: info.Fallbacks()}, nil
		}
		s.Close()
		why = err
	case errors.As(err, &kerr):
		why = kerr.Err
	default:
		// The rewritten model may fail to compile where the export
		// does not: the explicit cache decides, and its error wins.
		why = err
	}
	e, err := OpenExplicit(path, opts, ctx, cfg)
	if err != nil {
		if kerr == nil && why != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w (the in-place KV cache was not possible either: %v)", err, why)
	}
	return &Decoder{Stepper: e, s: e.Session(), Mode: KVExplicit, Fallback: why.Error()}, nil
}
