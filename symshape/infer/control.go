package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Control flow. Subgraph values get shapes where the bodies can be derived
// from their inputs; outputs whose shape differs between branches or
// iterations get fresh symbols, recorded in Result.Fresh.

func init() {
	register("", ifRule, "If")
	register("", loopRule, "Loop")
	register("", scanRule, "Scan")
}

// runSubgraph derives g's values given its inputs' shapes and types.
func (c *ctx) runSubgraph(g *graph.Graph, inShapes [][]symshape.Expr, inTypes []dtype.Type) error {
	if g == nil {
		return fmt.Errorf("subgraph is missing")
	}
	if len(inShapes) != len(g.Inputs) {
		return fmt.Errorf("subgraph %q has %d inputs, the node provides %d", g.Name, len(g.Inputs), len(inShapes))
	}
	saved := c.node
	defer func() { c.node = saved }()
	for i, v := range g.Inputs {
		if v.Type == dtype.Undefined {
			v.Type = inTypes[i]
		}
		c.setShape(v, copyShape(inShapes[i]))
	}
	for _, v := range g.Initializers {
		if err := c.setConstValue(v, v.Const); err != nil {
			return fmt.Errorf("subgraph %q initializer %q: %w", g.Name, v.Name, err)
		}
	}
	for _, v := range g.OuterValues() {
		var src *graph.Value
		if g.Parent != nil {
			src = g.Parent.Lookup(v.Name)
		}
		if src == nil || src.Shape == nil {
			return fmt.Errorf("subgraph %q reads outer value %q, which has no shape", g.Name, v.Name)
		}
		if v.Type == dtype.Undefined {
			v.Type = src.Type
		}
		c.setShape(v, copyShape(src.Shape))
		if src.Elems != nil {
			v.Elems = append([]symshape.Expr(nil), src.Elems...)
		}
		if c.known[src] {
			c.known[v] = true
		}
	}
	return c.runGraph(g, false)
}

// merge combines the shapes two alternatives give one output: equal dims
// stay, differing ones become fresh.
func (c *ctx) merge(out *graph.Value, a, b []symshape.Expr, why string) ([]symshape.Expr, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("output %q has rank %d in one branch and %d in the other (%s)", out.Name, len(a), len(b), why)
	}
	res := make([]symshape.Expr, len(a))
	for i := range a {
		if c.resolve(a[i]).Equal(c.resolve(b[i])) || c.cmp(a[i], b[i]) == symshape.Equal {
			res[i] = c.resolve(a[i])
			continue
		}
		res[i] = c.fresh(out, i, fmt.Sprintf("%s: %s vs %s", why, a[i], b[i]))
	}
	return res, nil
}

// ifRule: a constant condition selects a branch; otherwise both branches
// are derived and their output shapes merged.
func ifRule(c *ctx, n *graph.Node) error {
	thenG, elseG := n.AttrGraph("then_branch"), n.AttrGraph("else_branch")
	if thenG == nil || elseG == nil {
		return fmt.Errorf("then_branch and else_branch are required")
	}
	errT := c.runSubgraph(thenG, nil, nil)
	errE := c.runSubgraph(elseG, nil, nil)
	if k, ok := c.ints(n, 0); ok && len(k) == 1 {
		g, err := thenG, errT
		if k[0] == 0 {
			g, err = elseG, errE
		}
		if err != nil {
			return fmt.Errorf("branch %q: %w", g.Name, err)
		}
		if len(g.Outputs) != len(n.Outputs) {
			return fmt.Errorf("branch %q has %d outputs, the node %d", g.Name, len(g.Outputs), len(n.Outputs))
		}
		for i, v := range g.Outputs {
			c.setOut(n, i, copyShape(v.Shape), v.Type)
			if v.Elems != nil {
				c.setElems(n, i, v.Elems)
			}
		}
		return nil
	}
	for i, out := range n.Outputs {
		if out == nil {
			continue
		}
		var shape []symshape.Expr
		var t dtype.Type
		switch {
		case errT == nil && errE == nil && i < len(thenG.Outputs) && i < len(elseG.Outputs):
			var err error
			shape, err = c.merge(out, thenG.Outputs[i].Shape, elseG.Outputs[i].Shape, "If branches give different sizes")
			if err != nil {
				return err
			}
			t = thenG.Outputs[i].Type
		default:
			// A branch could not be derived: fall back on declarations.
			var decl []graph.Dim
			if i < len(thenG.Outputs) {
				decl, t = thenG.Outputs[i].Declared, thenG.Outputs[i].Type
			}
			if decl == nil && i < len(elseG.Outputs) {
				decl, t = elseG.Outputs[i].Declared, elseG.Outputs[i].Type
			}
			if decl == nil {
				if errT != nil {
					return fmt.Errorf("then branch: %w", errT)
				}
				return fmt.Errorf("else branch: %w", errE)
			}
			shape = make([]symshape.Expr, len(decl))
			for j, d := range decl {
				if d.Value >= 0 && d.Param == "" {
					shape[j] = symshape.Const(d.Value)
					continue
				}
				shape[j] = c.fresh(out, j, fmt.Sprintf("If branch not derivable (then: %v; else: %v)", errT, errE))
			}
		}
		c.setOut(n, i, shape, t)
	}
	return nil
}

// loopRule: carried values keep their shape when the body preserves it;
// scan outputs stack the body's per-iteration values along a new first axis
// whose length is M when the loop runs exactly M times.
func loopRule(c *ctx, n *graph.Node) error {
	body := n.AttrGraph("body")
	if body == nil {
		return fmt.Errorf("attribute body is missing")
	}
	nCarried := len(n.Inputs) - 2
	if nCarried < 0 {
		return fmt.Errorf("needs inputs M and cond (possibly omitted)")
	}
	shapes := [][]symshape.Expr{nil, nil}
	types := []dtype.Type{dtype.Int64, dtype.Bool}
	for i := 0; i < nCarried; i++ {
		s, err := c.shapeOf(n, 2+i)
		if err != nil {
			return err
		}
		shapes = append(shapes, s)
		types = append(types, typeOf(n, 2+i))
	}
	if err := c.runSubgraph(body, shapes, types); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if len(body.Outputs) != 1+len(n.Outputs) {
		return fmt.Errorf("body has %d outputs; the node has %d (cond is extra)", len(body.Outputs), len(n.Outputs))
	}
	for i := 0; i < nCarried; i++ {
		bo := body.Outputs[1+i]
		s, err := c.merge(output(n, i), shapes[2+i], bo.Shape, "Loop-carried value changes shape across iterations")
		if err != nil {
			return err
		}
		c.setOut(n, i, s, types[2+i])
	}
	// Trip count: M when the condition is absent or constantly true.
	var trip symshape.Expr
	m, haveM := c.elems(n, 0)
	// Without a cond input the loop is a for loop (the body's cond output is
	// ignored); with one, it must start true and the body must keep it true.
	condTrue := input(n, 1) == nil
	if k, ok := c.ints(n, 1); ok && len(k) == 1 && k[0] != 0 {
		if e := body.Outputs[0].Elems; len(e) == 1 {
			if v, ok := e[0].Const(); ok && v != 0 {
				condTrue = true
			}
		}
	}
	for i := nCarried; i < len(n.Outputs); i++ {
		out := output(n, i)
		if out == nil {
			continue
		}
		if !trip.IsValid() {
			if haveM && len(m) == 1 && condTrue {
				trip = m[0]
			} else {
				trip = c.fresh(out, 0, "Loop trip count depends on run-time values")
			}
		}
		bo := body.Outputs[1+i]
		c.setOut(n, i, append([]symshape.Expr{trip}, bo.Shape...), bo.Type)
	}
	return nil
}

// scanRule handles opset 9+ (scan axes attributes) and opset 8 (a leading
// batch axis and an optional sequence_lens input).
func scanRule(c *ctx, n *graph.Node) error {
	body := n.AttrGraph("body")
	if body == nil {
		return fmt.Errorf("attribute body is missing")
	}
	m := int(n.AttrInt("num_scan_inputs", 0))
	first := 0
	batch := c.opset() < 9
	if batch {
		first = 1 // sequence_lens
	}
	ins := n.Inputs[first:]
	nState := len(ins) - m
	if m <= 0 || nState < 0 {
		return fmt.Errorf("num_scan_inputs %d does not fit %d inputs", m, len(ins))
	}
	inAxes := attrInts(n, "scan_input_axes", make([]int64, m))
	var shapes [][]symshape.Expr
	var types []dtype.Type
	var seq symshape.Expr
	var bdim symshape.Expr
	for i := 0; i < nState; i++ {
		s, err := c.shapeOf(n, first+i)
		if err != nil {
			return err
		}
		if batch {
			if len(s) == 0 {
				return fmt.Errorf("state %d %s lacks the batch axis", i, symshape.FormatShape(s))
			}
			bdim, s = s[0], s[1:]
		}
		shapes = append(shapes, s)
		types = append(types, typeOf(n, first+i))
	}
	for j := 0; j < m; j++ {
		s, err := c.shapeOf(n, first+nState+j)
		if err != nil {
			return err
		}
		if batch {
			if len(s) < 2 {
				return fmt.Errorf("scan input %d %s lacks batch and sequence axes", j, symshape.FormatShape(s))
			}
			bdim = s[0]
			s = s[1:]
		}
		ax := 0
		if !batch {
			if j >= len(inAxes) {
				return fmt.Errorf("scan_input_axes %v is too short", inAxes)
			}
			a, err := normAxis(inAxes[j], len(s))
			if err != nil {
				return err
			}
			ax = a
		}
		if !seq.IsValid() {
			seq = s[ax]
		} else if _, err := c.unify(seq, s[ax], func() string { return "scan inputs' sequence lengths" }); err != nil {
			return err
		}
		slice := append(copyShape(s[:ax]), s[ax+1:]...)
		shapes = append(shapes, slice)
		types = append(types, typeOf(n, first+nState+j))
	}
	if err := c.runSubgraph(body, shapes, types); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if len(body.Outputs) != len(n.Outputs) {
		return fmt.Errorf("body has %d outputs, the node %d", len(body.Outputs), len(n.Outputs))
	}
	outAxes := attrInts(n, "scan_output_axes", nil)
	for i, bo := range body.Outputs {
		var s []symshape.Expr
		if i < nState {
			var err error
			if s, err = c.merge(output(n, i), shapes[i], bo.Shape, "Scan state changes shape across iterations"); err != nil {
				return err
			}
		} else {
			k := i - nState
			ax := 0
			if !batch && k < len(outAxes) {
				a, err := normAxis(outAxes[k], len(bo.Shape)+1)
				if err != nil {
					return err
				}
				ax = a
			}
			s = append(append(copyShape(bo.Shape[:ax]), seq), bo.Shape[ax:]...)
		}
		if batch {
			s = append([]symshape.Expr{bdim}, s...)
		}
		c.setOut(n, i, s, bo.Type)
	}
	return nil
}
