package infer

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// nondeterministic ops are never folded, whatever their inputs.
var nondeterministic = map[string]bool{
	"RandomNormal": true, "RandomUniform": true, "RandomNormalLike": true,
	"RandomUniformLike": true, "Bernoulli": true, "Multinomial": true,
}

// classify decides how n runs (see Class) and records which of its outputs
// are constants or host values for the nodes that read them.
func (c *ctx) classify(n *graph.Node) {
	cl := c.classOf(n)
	c.res.Class[n] = cl
	for _, v := range n.Outputs {
		if v == nil {
			continue
		}
		switch cl {
		case Folded:
			c.host[v] = true
			if _, ok := constInts(v.Elems); ok {
				c.known[v] = true
			}
		case ConstFold:
			c.host[v] = true
			c.known[v] = true
		case HostRuntime:
			c.host[v] = true
		}
	}
}

func (c *ctx) classOf(n *graph.Node) Class {
	if n.Domain == "" && nondeterministic[n.OpType] {
		return Device
	}
	all := true
	for _, v := range n.Outputs {
		if v != nil && v.Elems == nil {
			all = false
			break
		}
	}
	if all {
		return Folded
	}
	ins := append(append([]*graph.Value(nil), n.Inputs...), n.ImplicitInputs()...)
	allConst, allHost := true, true
	for _, v := range ins {
		if v == nil {
			continue
		}
		if !c.isConst(v) {
			allConst = false
		}
		if !c.isHost(v) {
			allHost = false
		}
	}
	if allConst {
		// Folding runs at load and keeps its outputs for the session's
		// life: within the budget only (a ConstantOfShape of [2^33] read
		// by one Add is not worth 32 GiB of host memory at load).
		var bytes int64
		fits := true
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			b, ok := c.outputBytes(v)
			if !ok {
				fits = false
				break
			}
			bytes += b
		}
		if fits && c.folded+bytes <= c.foldBudget() {
			c.folded += bytes
			return ConstFold
		}
		return Device
	}
	if allHost {
		small := true
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			cnt, ok := constCount(v.Shape)
			if !ok || cnt > MaxElems || v.Type == dtype.Undefined {
				small = false
				break
			}
		}
		if small {
			return HostRuntime
		}
	}
	return Device
}

// isConst reports whether v's contents are fixed at load time.
func (c *ctx) isConst(v *graph.Value) bool {
	if c.known[v] || v.Const != nil {
		return true
	}
	_, ok := constInts(v.Elems)
	return ok && v.Elems != nil
}

// isHost reports whether v is computed on the host: constants, and outputs
// of Folded, ConstFold and HostRuntime nodes.
func (c *ctx) isHost(v *graph.Value) bool {
	return c.host[v] || c.isConst(v)
}
