package engine

import (
	"fmt"
	"math"
	"strings"
)

// ONNX's recurrent layers (RNN, GRU, LSTM), computed on the CPU in float64
// step by step: the sequential dependency leaves a device little to do at
// the sizes exported models use them at, and none of the engine's target
// networks has one.

func init() {
	registerHost(hostRecurrent, "RNN", "GRU", "LSTM")
}

// rnnActivation returns the named activation with its alpha and beta.
func rnnActivation(name string, alpha, beta float64, hasA, hasB bool) (func(float64) float64, error) {
	def := func(a, b float64) {
		if !hasA {
			alpha = a
		}
		if !hasB {
			beta = b
		}
	}
	switch strings.ToLower(name) {
	case "sigmoid":
		return func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, nil
	case "tanh":
		return math.Tanh, nil
	case "relu":
		return func(x float64) float64 { return math.Max(x, 0) }, nil
	case "leakyrelu":
		def(0.01, 0)
		return func(x float64) float64 {
			if x < 0 {
				return alpha * x
			}
			return x
		}, nil
	case "thresholdedrelu":
		def(1, 0)
		return func(x float64) float64 {
			if x > alpha {
				return x
			}
			return 0
		}, nil
	case "hardsigmoid":
		def(0.2, 0.5)
		return func(x float64) float64 { return math.Max(0, math.Min(1, alpha*x+beta)) }, nil
	case "scaledtanh":
		def(1, 1)
		return func(x float64) float64 { return alpha * math.Tanh(beta*x) }, nil
	case "affine":
		def(1, 0)
		return func(x float64) float64 { return alpha*x + beta }, nil
	case "elu":
		def(1, 0)
		return func(x float64) float64 {
			if x < 0 {
				return alpha * (math.Exp(x) - 1)
			}
			return x
		}, nil
	case "softsign":
		return func(x float64) float64 { return x / (1 + math.Abs(x)) }, nil
	case "softplus":
		return func(x float64) float64 { return math.Log1p(math.Exp(x)) }, nil
	}
	return nil, fmt.Errorf("activation %q", name)
}

// hostRecurrent runs RNN, GRU or LSTM over the whole sequence, each
// direction on its own, honouring sequence_lens, initial states, clip,
// activations and (LSTM) peepholes and input_forget, (GRU)
// linear_before_reset, and layout.
func hostRecurrent(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	n := hc.n
	op := n.OpType
	gates := map[string]int{"RNN": 1, "GRU": 3, "LSTM": 4}[op]
	hidden := int(n.AttrInt("hidden_size", 0))
	if hidden <= 0 {
		return nil, fmt.Errorf("hidden_size %d", hidden)
	}
	dirName := n.AttrString("direction", "forward")
	dirs := 1
	switch dirName {
	case "forward", "reverse":
	case "bidirectional":
		dirs = 2
	default:
		return nil, fmt.Errorf("direction %q", dirName)
	}
	layout := n.AttrInt("layout", 0)
	x := ins[0]
	if len(x.shape) != 3 {
		return nil, fmt.Errorf("X %v: want rank 3", x.shape)
	}
	seq, batch, in := x.shape[0], x.shape[1], x.shape[2]
	if layout != 0 {
		seq, batch = x.shape[1], x.shape[0]
	}
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	xAt := func(t, b, i int) float64 {
		if layout != 0 {
			return xv[(b*seq+t)*in+i]
		}
		return xv[(t*batch+b)*in+i]
	}
	w, err := ins[1].floats()
	if err != nil {
		return nil, err
	}
	r, err := ins[2].floats()
	if err != nil {
		return nil, err
	}
	G := gates * hidden
	if len(w) != dirs*G*in || len(r) != dirs*G*hidden {
		return nil, fmt.Errorf("W %v or R %v do not fit %d directions of %d gates of %d from %d inputs", ins[1].shape, ins[2].shape, dirs, gates, hidden, in)
	}
	bias, err := optFloats(ins, 3)
	if err != nil {
		return nil, err
	}
	if bias != nil && len(bias) != dirs*2*G {
		return nil, fmt.Errorf("B %v does not fit", ins[3].shape)
	}
	lens := make([]int, batch)
	for i := range lens {
		lens[i] = seq
	}
	if len(ins) > 4 && ins[4] != nil {
		l, err := ins[4].ints()
		if err != nil {
			return nil, err
		}
		if len(l) != batch {
			return nil, fmt.Errorf("sequence_lens has %d entries for batch %d", len(l), batch)
		}
		for i, v := range l {
			if v < 0 || v > int64(seq) {
				return nil, fmt.Errorf("sequence length %d outside 0..%d", v, seq)
			}
			lens[i] = int(v)
		}
	}
	// stateAt reads an initial state [dirs, batch, hidden] (or batch-first).
	state := func(i int) ([]float64, error) {
		v, err := optFloats(ins, i)
		if err != nil || v == nil {
			return nil, err
		}
		if len(v) != dirs*batch*hidden {
			return nil, fmt.Errorf("initial state %v does not fit", ins[i].shape)
		}
		return v, nil
	}
	h0, err := state(5)
	if err != nil {
		return nil, err
	}
	var c0, peep []float64
	if op == "LSTM" {
		if c0, err = state(6); err != nil {
			return nil, err
		}
		if peep, err = optFloats(ins, 7); err != nil {
			return nil, err
		}
		if peep != nil && len(peep) != dirs*3*hidden {
			return nil, fmt.Errorf("P %v does not fit", ins[7].shape)
		}
	}
	stIdx := func(d, b, j int) int {
		if layout != 0 {
			return (b*dirs+d)*hidden + j
		}
		return (d*batch+b)*hidden + j
	}
	// Activations: f (and g, h) per direction.
	perDir := map[string]int{"RNN": 1, "GRU": 2, "LSTM": 3}[op]
	names := map[string][]string{"RNN": {"Tanh"}, "GRU": {"Sigmoid", "Tanh"}, "LSTM": {"Sigmoid", "Tanh", "Tanh"}}[op]
	given, _ := n.AttrStrings("activations")
	alphas, _ := n.AttrFloats("activation_alpha")
	betas, _ := n.AttrFloats("activation_beta")
	acts := make([][]func(float64) float64, dirs)
	for d := 0; d < dirs; d++ {
		for k := 0; k < perDir; k++ {
			name, j := names[k], d*perDir+k
			if len(given) > 0 {
				if j >= len(given) {
					return nil, fmt.Errorf("%d activations for %d directions", len(given), dirs)
				}
				name = given[j]
			}
			var a, b float64
			if j < len(alphas) {
				a = float64(alphas[j])
			}
			if j < len(betas) {
				b = float64(betas[j])
			}
			f, err := rnnActivation(name, a, b, j < len(alphas), j < len(betas))
			if err != nil {
				return nil, hc.unsupported("%v", err)
			}
			acts[d] = append(acts[d], f)
		}
	}
	clip := math.Inf(1)
	if a := n.Attr("clip"); a != nil {
		clip = float64(a.F)
	}
	clipf := func(v float64) float64 { return math.Max(-clip, math.Min(clip, v)) }
	lbr := n.AttrInt("linear_before_reset", 0) != 0
	inputForget := n.AttrInt("input_forget", 0) != 0

	yShape := []int{seq, dirs, batch, hidden}
	stShape := []int{dirs, batch, hidden}
	if layout != 0 {
		yShape = []int{batch, seq, dirs, hidden}
		stShape = []int{batch, dirs, hidden}
	}
	Y := make([]float64, numel(yShape))
	yIdx := func(t, d, b, j int) int {
		if layout != 0 {
			return ((b*seq+t)*dirs+d)*hidden + j
		}
		return ((t*dirs+d)*batch+b)*hidden + j
	}
	Yh := make([]float64, numel(stShape))
	Yc := make([]float64, numel(stShape))
	gx := make([]float64, G) // X·W^T + Wb for one step
	gh := make([]float64, G) // H·R^T + Rb for one step
	for d := 0; d < dirs; d++ {
		reverse := dirName == "reverse" || d == 1
		W, R := w[d*G*in:(d+1)*G*in], r[d*G*hidden:(d+1)*G*hidden]
		var wb, rb []float64
		if bias != nil {
			wb, rb = bias[d*2*G:d*2*G+G], bias[d*2*G+G:(d+1)*2*G]
		}
		f := acts[d]
		for b := 0; b < batch; b++ {
			H := make([]float64, hidden)
			C := make([]float64, hidden)
			for j := range H {
				if h0 != nil {
					H[j] = h0[stIdx(d, b, j)]
				}
				if c0 != nil {
					C[j] = c0[stIdx(d, b, j)]
				}
			}
			for s := 0; s < lens[b]; s++ {
				t := s
				if reverse {
					t = lens[b] - 1 - s
				}
				for g := 0; g < G; g++ {
					var a, c float64
					for i := 0; i < in; i++ {
						a += xAt(t, b, i) * W[g*in+i]
					}
					for i := 0; i < hidden; i++ {
						c += H[i] * R[g*hidden+i]
					}
					if wb != nil {
						a += wb[g]
						c += rb[g]
					}
					gx[g], gh[g] = a, c
				}
				next := make([]float64, hidden)
				switch op {
				case "RNN":
					for j := range next {
						next[j] = f[0](clipf(gx[j] + gh[j]))
					}
				case "GRU":
					// Gate order z, r, h.
					rH := make([]float64, hidden)
					rt := make([]float64, hidden)
					for j := 0; j < hidden; j++ {
						rt[j] = f[0](clipf(gx[hidden+j] + gh[hidden+j]))
						rH[j] = rt[j] * H[j]
					}
					for j := 0; j < hidden; j++ {
						z := f[0](clipf(gx[j] + gh[j]))
						var hh float64
						if lbr {
							hh = gx[2*hidden+j] + rt[j]*gh[2*hidden+j]
						} else {
							var s float64
							for i := 0; i < hidden; i++ {
								s += rH[i] * R[(2*hidden+j)*hidden+i]
							}
							if rb != nil {
								s += rb[2*hidden+j]
							}
							hh = gx[2*hidden+j] + s
						}
						ht := f[1](clipf(hh))
						next[j] = (1-z)*ht + z*H[j]
					}
				case "LSTM":
					// Gate order i, o, f, c; peepholes i, o, f.
					var pi, po, pf []float64
					if peep != nil {
						p := peep[d*3*hidden : (d+1)*3*hidden]
						pi, po, pf = p[:hidden], p[hidden:2*hidden], p[2*hidden:]
					}
					nc := make([]float64, hidden)
					for j := 0; j < hidden; j++ {
						ai := gx[j] + gh[j]
						af := gx[2*hidden+j] + gh[2*hidden+j]
						if peep != nil {
							ai += pi[j] * C[j]
							af += pf[j] * C[j]
						}
						it := f[0](clipf(ai))
						ft := f[0](clipf(af))
						if inputForget {
							ft = 1 - it
						}
						ct := f[1](clipf(gx[3*hidden+j] + gh[3*hidden+j]))
						nc[j] = ft*C[j] + it*ct
						ao := gx[hidden+j] + gh[hidden+j]
						if peep != nil {
							ao += po[j] * nc[j]
						}
						ot := f[0](clipf(ao))
						next[j] = ot * f[2](nc[j])
					}
					C = nc
				}
				H = next
				for j := 0; j < hidden; j++ {
					Y[yIdx(t, d, b, j)] = H[j]
				}
			}
			for j := 0; j < hidden; j++ {
				Yh[stIdx(d, b, j)] = H[j]
				Yc[stIdx(d, b, j)] = C[j]
			}
		}
	}
	dt := x.dt
	mk := func(shape []int, v []float64) *hostTensor {
		h := newHostTensor(dt, shape)
		for i, e := range v {
			putFloat(dt, h.data, i, e)
		}
		return h
	}
	outs := []*hostTensor{mk(yShape, Y), mk(stShape, Yh)}
	if op == "LSTM" {
		outs = append(outs, mk(stShape, Yc))
	}
	return outs, nil
}
