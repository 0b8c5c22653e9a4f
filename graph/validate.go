package graph

import (
	"fmt"
)

// Validate checks the invariants the rest of the engine relies on, for g and
// all its subgraphs: every value a node reads is defined (produced by a node
// of g, a graph input, an initializer, or an outer reference that an
// enclosing graph defines); no value has two producers; the nodes are in
// topological order (a cycle is reported as one); graph outputs are produced;
// element types are known; initializer data match their dims; and the
// producer/consumer links agree with the nodes.
func (g *Graph) Validate() error {
	return g.validate(0)
}

func (g *Graph) validate(depth int) error {
	if depth > maxGraphDepth {
		return fmt.Errorf("graph %q: subgraphs nested deeper than %d levels", g.Name, maxGraphDepth)
	}
	if err := g.validateValues(); err != nil {
		return fmt.Errorf("graph %q: %w", g.Name, err)
	}
	roots := make(map[*Value]bool, len(g.Inputs)+len(g.Initializers))
	for _, v := range g.Inputs {
		roots[v] = true
	}
	for _, v := range g.Initializers {
		roots[v] = true
	}
	type edge struct {
		v *Value
		n *Node
	}
	consumes := map[edge]bool{}
	for _, v := range g.values {
		for _, c := range v.Consumers {
			consumes[edge{v, c}] = true
		}
	}
	pos := make(map[*Node]int, len(g.Nodes))
	for i, n := range g.Nodes {
		if n == nil {
			return fmt.Errorf("graph %q: node %d is nil", g.Name, i)
		}
		if _, dup := pos[n]; dup {
			return fmt.Errorf("graph %q: node %v appears twice in the node list", g.Name, n)
		}
		if n.OpType == "" || n.Name == "" {
			return fmt.Errorf("graph %q: node %d %v has no name or op type", g.Name, i, n)
		}
		if n.graph != g {
			return fmt.Errorf("graph %q: node %v does not belong to this graph", g.Name, n)
		}
		pos[n] = i
	}
	produced := map[*Value]*Node{}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			if p, dup := produced[v]; dup {
				return fmt.Errorf("graph %q: value %q is produced by both node %v and node %v", g.Name, v.Name, p, n)
			}
			produced[v] = n
			if v.Producer != n {
				return fmt.Errorf("graph %q: node %v outputs %q, but the value names %v as producer (call Relink)", g.Name, n, v.Name, v.Producer)
			}
			if roots[v] || v.Outer {
				return fmt.Errorf("graph %q: node %v output %q redefines a graph input, initializer or outer value", g.Name, n, v.Name)
			}
			if err := g.checkRegistered(v); err != nil {
				return fmt.Errorf("graph %q: node %v output: %w", g.Name, n, err)
			}
			if !v.Type.Valid() {
				return fmt.Errorf("graph %q: node %v output %q has unknown element type %d", g.Name, n, v.Name, int32(v.Type))
			}
		}
	}
	var orderErr error
	for i, n := range g.Nodes {
		for j, v := range n.Inputs {
			if v == nil {
				continue
			}
			if err := g.checkDefined(v, pos, roots); err != nil {
				return fmt.Errorf("graph %q: node %v input %d %q is dangling: %w", g.Name, n, j, v.Name, err)
			}
			if p := v.Producer; p != nil && pos[p] >= i && orderErr == nil {
				orderErr = fmt.Errorf("graph %q: node %v reads %q before its producer %v (nodes not in topological order; call Sort)", g.Name, n, v.Name, p)
			}
			if !consumes[edge{v, n}] {
				return fmt.Errorf("graph %q: node %v reads %q but is not among its consumers (call Relink)", g.Name, n, v.Name)
			}
		}
		for _, s := range n.Subgraphs() {
			if s.Parent != g || s.Owner != n {
				return fmt.Errorf("graph %q: node %v holds subgraph %q whose parent link is wrong (call Relink)", g.Name, n, s.Name)
			}
			if err := s.validate(depth + 1); err != nil {
				return fmt.Errorf("graph %q: node %v: %w", g.Name, n, err)
			}
			for _, o := range s.OuterValues() {
				v := g.values[o.Name]
				if v == nil {
					if g.Lookup(o.Name) != nil {
						return fmt.Errorf("graph %q: node %v: subgraph %q reads outer %q, which this graph does not list as an outer value", g.Name, n, s.Name, o.Name)
					}
					return fmt.Errorf("graph %q: node %v: subgraph %q reads %q, which no enclosing graph defines", g.Name, n, s.Name, o.Name)
				}
				if err := g.checkDefined(v, pos, roots); err != nil {
					return fmt.Errorf("graph %q: node %v: subgraph %q reads %q, which is dangling: %w", g.Name, n, s.Name, o.Name, err)
				}
				if p := v.Producer; p != nil && pos[p] >= i && orderErr == nil {
					orderErr = fmt.Errorf("graph %q: node %v reads %q (in subgraph %q) before its producer %v (nodes not in topological order; call Sort)", g.Name, n, v.Name, s.Name, p)
				}
			}
		}
	}
	if orderErr != nil {
		if _, err := g.topoOrder(); err != nil {
			return fmt.Errorf("graph %q: %w", g.Name, err) // a cycle says more than "out of order"
		}
		return orderErr
	}
	for i, v := range g.Outputs {
		if v == nil {
			return fmt.Errorf("graph %q: output %d is nil", g.Name, i)
		}
		if err := g.checkDefined(v, pos, roots); err != nil {
			return fmt.Errorf("graph %q: graph output %q is never produced: %w", g.Name, v.Name, err)
		}
	}
	return nil
}

// validateValues checks g's inputs and initializers.
func (g *Graph) validateValues() error {
	seen := map[*Value]bool{}
	for _, v := range g.Initializers {
		if v == nil {
			return fmt.Errorf("nil initializer")
		}
		if seen[v] {
			return fmt.Errorf("initializer %q listed twice", v.Name)
		}
		seen[v] = true
		if v.Const == nil {
			return fmt.Errorf("initializer %q has no data", v.Name)
		}
		if !v.Const.Type.Valid() || !v.Type.Valid() {
			return fmt.Errorf("initializer %q has unknown element type %d", v.Name, int32(v.Const.Type))
		}
		if err := v.Const.checkSize(); err != nil {
			return fmt.Errorf("initializer %q: %w", v.Name, err)
		}
		if v.Producer != nil {
			return fmt.Errorf("initializer %q is also produced by node %v", v.Name, v.Producer)
		}
		if err := g.checkRegistered(v); err != nil {
			return err
		}
	}
	for _, v := range g.Inputs {
		if v == nil {
			return fmt.Errorf("nil graph input")
		}
		if seen[v] {
			return fmt.Errorf("graph input %q listed twice or also an initializer", v.Name)
		}
		seen[v] = true
		if !v.Type.Valid() {
			return fmt.Errorf("graph input %q has unknown element type %d", v.Name, int32(v.Type))
		}
		if v.Producer != nil {
			return fmt.Errorf("graph input %q is also produced by node %v", v.Name, v.Producer)
		}
		if err := g.checkRegistered(v); err != nil {
			return err
		}
	}
	return nil
}

// checkRegistered verifies that v is the value g's scope knows by v's name,
// which catches two distinct values sharing one name.
func (g *Graph) checkRegistered(v *Value) error {
	switch w := g.values[v.Name]; {
	case w == nil:
		return fmt.Errorf("value %q is not registered in the graph's scope (create it with NewValue)", v.Name)
	case w != v:
		return fmt.Errorf("two different values are named %q", v.Name)
	}
	return nil
}

// checkDefined reports why v cannot be read in g, or nil when it can.
func (g *Graph) checkDefined(v *Value, pos map[*Node]int, roots map[*Value]bool) error {
	if g.values[v.Name] != v {
		return fmt.Errorf("%q is not a value of this graph", v.Name)
	}
	switch {
	case v.Producer != nil:
		if _, ok := pos[v.Producer]; !ok {
			return fmt.Errorf("its producer %v is not in the graph", v.Producer)
		}
		return nil
	case v.Outer:
		if g.Parent == nil || g.Parent.Lookup(v.Name) == nil {
			return fmt.Errorf("outer reference %q is not defined by any enclosing graph", v.Name)
		}
		return nil
	case roots[v]:
		return nil
	}
	return fmt.Errorf("no node produces it and it is not a graph input or initializer")
}
