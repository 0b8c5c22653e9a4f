package graph

import (
	"container/heap"
	"fmt"
	"strings"
)

// NewValue creates a value in g whose name is unique across the whole model
// (all graphs and subgraphs): name itself when free, else name_1, name_2, ...
func (g *Graph) NewValue(name string) *Value {
	if name == "" {
		name = "v"
	}
	n := name
	for g.names.has(n) {
		// Resuming from the last suffix keeps repeated requests for one base
		// name linear overall.
		g.names.next[name]++
		n = fmt.Sprintf("%s_%d", name, g.names.next[name])
	}
	return g.addValue(n)
}

// AddNode inserts n into g and wires it: its outputs get n as producer, its
// inputs (and the outer values its subgraphs use) get n as a consumer. n is
// placed right after the last producer of what it reads, the earliest
// position that keeps g topologically sorted; after ReplaceAllUses points
// older consumers at n's outputs the order stays valid, because n's inputs
// were already available before the nodes it replaces. Outputs may be values
// made by NewValue or fresh *Value{Name: ...} literals (registered here);
// inputs must already belong to g.
func (g *Graph) AddNode(n *Node) error {
	if n == nil || n.OpType == "" {
		return fmt.Errorf("graph %q: AddNode: node needs an op type", g.Name)
	}
	if n.graph != nil {
		return fmt.Errorf("graph %q: AddNode: node %v already belongs to graph %q", g.Name, n, n.graph.Name)
	}
	n.Domain = normDomain(n.Domain)
	if n.Attrs == nil {
		n.Attrs = map[string]*Attr{}
	}
	for i, v := range n.Inputs {
		if v != nil && g.values[v.Name] != v {
			return fmt.Errorf("graph %q: AddNode %v: input %d %q is not a value of this graph", g.Name, n, i, v.Name)
		}
	}
	seen := map[*Value]bool{}
	for i, v := range n.Outputs {
		if v == nil {
			continue
		}
		if seen[v] {
			return fmt.Errorf("graph %q: AddNode %v: output %q listed twice", g.Name, n, v.Name)
		}
		seen[v] = true
		switch {
		case v.graph == nil:
			if v.Name == "" || g.names.has(v.Name) {
				return fmt.Errorf("graph %q: AddNode %v: output %d name %q is empty or already used (use NewValue)", g.Name, n, i, v.Name)
			}
		case g.values[v.Name] != v:
			return fmt.Errorf("graph %q: AddNode %v: output %q is not a value of this graph", g.Name, n, v.Name)
		case v.Producer != nil:
			return fmt.Errorf("graph %q: AddNode %v: output %q is already produced by node %v", g.Name, n, v.Name, v.Producer)
		case g.isInputOrInit(v) || v.Outer:
			return fmt.Errorf("graph %q: AddNode %v: output %q is a graph input, initializer or outer value", g.Name, n, v.Name)
		}
	}
	for _, v := range n.Outputs {
		if v != nil && v.graph == nil {
			v.graph = g
			g.values[v.Name] = v
			g.names.add(v.Name)
		}
	}
	for _, s := range n.Subgraphs() {
		s.Parent, s.Owner = g, n
		s.names = g.names
	}
	if n.Name == "" {
		n.Name = g.uniqueNodeName(n.OpType)
	}
	n.graph = g
	pos := 0
	for _, v := range n.uses() {
		if p := v.Producer; p != nil && p.graph == g {
			for i := len(g.Nodes) - 1; i >= pos; i-- {
				if g.Nodes[i] == p {
					pos = i + 1
					break
				}
			}
		}
	}
	g.Nodes = append(g.Nodes, nil)
	copy(g.Nodes[pos+1:], g.Nodes[pos:])
	g.Nodes[pos] = n
	for _, v := range n.Outputs {
		if v != nil {
			v.Producer = n
		}
	}
	for _, v := range n.uses() {
		addConsumer(v, n)
	}
	return nil
}

// uniqueNodeName returns "<op>_<k>" not used by any node of g.
func (g *Graph) uniqueNodeName(op string) string {
	used := make(map[string]bool, len(g.Nodes))
	for _, m := range g.Nodes {
		used[m.Name] = true
	}
	for k := len(g.Nodes); ; k++ {
		if s := fmt.Sprintf("%s_%d", op, k); !used[s] {
			return s
		}
	}
}

// RemoveNode takes n out of g and unwires it. Its outputs lose their
// producer; outputs nobody uses are dropped from g's scope, while outputs that
// still have consumers stay (dangling until replaced: Validate reports them).
func (g *Graph) RemoveNode(n *Node) error {
	idx := -1
	for i, m := range g.Nodes {
		if m == n {
			idx = i
			break
		}
	}
	if idx < 0 {
		return fmt.Errorf("graph %q: RemoveNode: node %v is not in this graph", g.Name, n)
	}
	g.Nodes = append(g.Nodes[:idx], g.Nodes[idx+1:]...)
	for _, v := range n.uses() {
		removeConsumer(v, n)
	}
	for _, v := range n.Outputs {
		if v == nil || v.Producer != n {
			continue
		}
		v.Producer = nil
		if len(v.Consumers) == 0 && !containsValue(g.Outputs, v) && g.values[v.Name] == v {
			delete(g.values, v.Name)
		}
	}
	n.graph = nil
	return nil
}

// ReplaceAllUses makes every reader of old read repl instead: node inputs,
// graph outputs, and subgraphs of consuming nodes that reference old by name
// (their outer reference is renamed, or merged into an existing one for repl).
// Both values must belong to g's scope.
func (g *Graph) ReplaceAllUses(old, repl *Value) error {
	if old == nil || repl == nil {
		return fmt.Errorf("graph %q: ReplaceAllUses: nil value", g.Name)
	}
	if old == repl {
		return nil
	}
	if g.values[old.Name] != old || g.values[repl.Name] != repl {
		return fmt.Errorf("graph %q: ReplaceAllUses(%q, %q): both values must belong to this graph", g.Name, old.Name, repl.Name)
	}
	consumers := append([]*Node(nil), old.Consumers...)
	for _, c := range consumers {
		for i, v := range c.Inputs {
			if v == old {
				c.Inputs[i] = repl
			}
		}
		for _, s := range c.Subgraphs() {
			if err := s.renameOuter(old.Name, repl.Name); err != nil {
				return fmt.Errorf("graph %q: ReplaceAllUses(%q, %q) in node %v: %w", g.Name, old.Name, repl.Name, c, err)
			}
		}
		addConsumer(repl, c)
	}
	old.Consumers = nil
	for i, v := range g.Outputs {
		if v == old {
			g.Outputs[i] = repl
		}
	}
	return nil
}

// renameOuter points s's outer reference oldName (and those of its nested
// subgraphs) at the enclosing value newName.
func (s *Graph) renameOuter(oldName, newName string) error {
	o := s.values[oldName]
	if o == nil || !o.Outer {
		return nil // not referenced here, or shadowed by a local value
	}
	for _, c := range o.Consumers {
		for _, sub := range c.Subgraphs() {
			if err := sub.renameOuter(oldName, newName); err != nil {
				return err
			}
		}
	}
	existing := s.values[newName]
	switch {
	case existing == nil:
		delete(s.values, oldName)
		o.Name = newName
		s.values[newName] = o
		return nil
	case existing.Outer:
		for _, c := range o.Consumers {
			for i, v := range c.Inputs {
				if v == o {
					c.Inputs[i] = existing
				}
			}
			addConsumer(existing, c)
		}
		for i, v := range s.Outputs {
			if v == o {
				s.Outputs[i] = existing
			}
		}
		o.Consumers = nil
		delete(s.values, oldName)
		return nil
	}
	return fmt.Errorf("subgraph %q defines its own %q, which would shadow the replacement", s.Name, newName)
}

// Relink recomputes every Producer and Consumers link of g and its subgraphs
// from the nodes, for code that edited Inputs/Outputs slices directly.
func (g *Graph) Relink() {
	for _, n := range g.Nodes {
		for _, s := range n.Subgraphs() {
			s.Parent, s.Owner, s.names = g, n, g.names
			s.Relink()
		}
	}
	g.link()
}

// link sets producers and consumers of g's own nodes (not subgraphs').
func (g *Graph) link() {
	for _, v := range g.values {
		v.Consumers = nil
	}
	for _, n := range g.Nodes {
		n.graph = g
		for _, v := range n.Outputs {
			if v != nil {
				v.Producer = n
			}
		}
	}
	for _, n := range g.Nodes {
		for _, v := range n.uses() {
			// uses() lists each value once per node and nodes come one at a
			// time, so a duplicate could only be the last entry.
			if k := len(v.Consumers); k == 0 || v.Consumers[k-1] != n {
				v.Consumers = append(v.Consumers, n)
			}
		}
	}
}

// RemoveDeadNodes removes nodes none of whose outputs is read by a node or a
// graph output, repeatedly, and returns how many it removed.
func (g *Graph) RemoveDeadNodes() int {
	removed := 0
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		used := false
		for _, v := range n.Outputs {
			if v != nil && (len(v.Consumers) > 0 || containsValue(g.Outputs, v)) {
				used = true
				break
			}
		}
		if !used {
			// Reverse topological order: the producers of n's inputs come
			// later in this loop and see n's consumption already gone.
			if g.RemoveNode(n) == nil {
				removed++
			}
		}
	}
	return removed
}

func addConsumer(v *Value, n *Node) {
	for _, c := range v.Consumers {
		if c == n {
			return
		}
	}
	v.Consumers = append(v.Consumers, n)
}

func removeConsumer(v *Value, n *Node) {
	out := v.Consumers[:0]
	for _, c := range v.Consumers {
		if c != n {
			out = append(out, c)
		}
	}
	v.Consumers = out
}

func (g *Graph) isInputOrInit(v *Value) bool {
	return containsValue(g.Inputs, v) || containsValue(g.Initializers, v)
}

// Sort re-orders the nodes of g and of all its subgraphs topologically,
// keeping the current order wherever it is already valid. A cycle is an error
// naming the nodes on it.
func (g *Graph) Sort() error {
	for _, n := range g.Nodes {
		for _, s := range n.Subgraphs() {
			if err := s.Sort(); err != nil {
				return err
			}
		}
	}
	return g.sortLocal()
}

// sortLocal sorts g's own nodes.
func (g *Graph) sortLocal() error {
	order, err := g.topoOrder()
	if err != nil {
		return fmt.Errorf("graph %q: %w", g.Name, err)
	}
	g.Nodes = order
	return nil
}

// topoOrder is Kahn's algorithm with ties broken by current position, so an
// already sorted list comes back unchanged.
func (g *Graph) topoOrder() ([]*Node, error) {
	nodes := g.Nodes
	idx := make(map[*Node]int, len(nodes))
	for i, n := range nodes {
		idx[n] = i
	}
	indeg := make([]int, len(nodes))
	succ := make([][]int, len(nodes))
	preds := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, v := range n.uses() {
			j, ok := idx[v.Producer]
			if v.Producer == nil || !ok {
				continue
			}
			succ[j] = append(succ[j], i)
			preds[i] = append(preds[i], j)
			indeg[i]++
		}
	}
	ready := &intHeap{}
	for i := range nodes {
		if indeg[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]*Node, 0, len(nodes))
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, nodes[i])
		for _, j := range succ[i] {
			indeg[j]--
			if indeg[j] == 0 {
				heap.Push(ready, j)
			}
		}
	}
	if len(order) == len(nodes) {
		return order, nil
	}
	// Every node left has a predecessor that is also left; walking
	// predecessors must revisit a node, and the loop walked is a cycle.
	start := -1
	for i := range nodes {
		if indeg[i] > 0 {
			start = i
			break
		}
	}
	visited := map[int]int{}
	var path []int
	cur := start
	for {
		if at, ok := visited[cur]; ok {
			path = path[at:]
			break
		}
		visited[cur] = len(path)
		path = append(path, cur)
		for _, p := range preds[cur] {
			if indeg[p] > 0 {
				cur = p
				break
			}
		}
	}
	names := make([]string, 0, len(path)+1)
	for k := len(path) - 1; k >= 0; k-- {
		names = append(names, nodes[path[k]].String())
	}
	names = append(names, nodes[path[len(path)-1]].String())
	return nil, fmt.Errorf("cycle: %s", strings.Join(names, " -> "))
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
