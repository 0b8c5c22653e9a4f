package graph

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tlite/tlite/graph/dtype"
)

// WriteOptions controls how Write lays a model out on disk.
type WriteOptions struct {
	// ExternalThreshold moves every tensor of at least this many bytes
	// (initializers and tensor attributes alike) into an external data file
	// next to the model; 0 keeps everything inline. External data is needed
	// for models beyond protobuf's 2 GiB message limit, and it is what lets
	// Load hand out weights as views of a memory-mapped file.
	ExternalThreshold int
	// DataFile is the external data file's name, a plain file name in the
	// model's folder (no directory part, so the file cannot land outside it).
	// The default is "<model file name>.data".
	DataFile string
	// Align is the alignment of each external tensor's offset in the data
	// file (default 64). Use 4096 when callers want page-aligned views.
	Align int
}

// defaultAlign keeps external tensors aligned for any vector load, which is
// what kernels reading mapped weights in place need.
const defaultAlign = 64

// maxMessage is protobuf's limit on one serialized message (2 GiB - 1).
const maxMessage = math.MaxInt32

// Marshal serializes m as an ONNX ModelProto with every tensor inline
// (raw_data, little-endian), for tests and small models. Tensors that were
// external when loaded are inlined.
//
// What is written (and read back by Parse) is described at Write.
func Marshal(m *Model) ([]byte, error) {
	e := &encoder{}
	b, err := e.model(m)
	if err != nil {
		return nil, fmt.Errorf("graph.Marshal: %w", err)
	}
	return b, nil
}

// Write serializes m to path, moving tensors of at least
// opts.ExternalThreshold bytes into an external data file in the same folder.
//
// Both files are written to temporary files in the folder and then renamed
// over their targets (the data file first, so a model file never names data
// that is not there yet). A model loaded from the old files keeps its
// memory-mapped views intact, because renaming replaces the directory entry
// and leaves the old file's contents alive until its mappings are released;
// writing a loaded model back over its own files works for the same reason.
//
// The written model holds: ir_version, producer, domain, model_version, doc,
// opset imports and metadata; per graph (subgraphs recursively) its name,
// doc, nodes (name, op type, domain, inputs and outputs with omitted optional
// ones as "", attributes of every kind, doc), initializers, runtime inputs,
// outputs and value_info for every other node output that has a type, a
// shape or a doc. Initializers are not listed as graph inputs (the ONNX
// convention since IR version 4); for models declaring an older IR version
// they are also listed as main-graph inputs, as those versions require.
//
// Shapes: a value's inferred Shape, when set, is written instead of its
// Declared dims; constant dims become dim_value and symbolic dims become
// dim_param holding the expression's String() text, so "past + seq"
// survives a round trip as the dim name "past + seq", which symshape.Parse
// (and so shape inference) reads back as the expression. Dims whose
// expression is invalid fall back to the declared dim of that axis.
func Write(m *Model, path string, opts WriteOptions) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("graph.Write %s: %w", path, err)
		}
	}()
	if opts.ExternalThreshold < 0 {
		return fmt.Errorf("ExternalThreshold %d is negative", opts.ExternalThreshold)
	}
	align := opts.Align
	if align == 0 {
		align = defaultAlign
	}
	if align < 0 {
		return fmt.Errorf("Align %d is negative", opts.Align)
	}
	if m == nil || m.Graph == nil {
		return fmt.Errorf("model has no graph")
	}
	dir, base := filepath.Dir(path), filepath.Base(path)
	e := &encoder{}
	var pending []pendingFile // renamed into place only once everything is written
	defer func() {
		for _, p := range pending {
			if p.tmp != "" {
				os.Remove(p.tmp)
			}
		}
	}()

	if opts.ExternalThreshold > 0 {
		loc := opts.DataFile
		if loc == "" {
			loc = base + ".data"
		}
		if err := checkDataFile(loc, base); err != nil {
			return err
		}
		order, err := e.planExternal(m.Graph, int64(opts.ExternalThreshold), int64(align))
		if err != nil {
			return err
		}
		if len(order) > 0 {
			e.location = loc
			dataPath := filepath.Join(dir, loc)
			tmp, err := writeTemp(dataPath, func(w *bufio.Writer) error { return e.writeData(w, order) })
			if err != nil {
				return fmt.Errorf("external data %s: %w", loc, err)
			}
			pending = append(pending, pendingFile{tmp: tmp, dst: dataPath})
		}
	}

	b, err := e.model(m)
	if err != nil {
		return err
	}
	tmp, err := writeTemp(path, func(w *bufio.Writer) error { _, err := w.Write(b); return err })
	if err != nil {
		return err
	}
	pending = append(pending, pendingFile{tmp: tmp, dst: path})
	for i := range pending {
		if err := os.Rename(pending[i].tmp, pending[i].dst); err != nil {
			return err
		}
		pending[i].tmp = ""
	}
	syncDir(dir)
	return nil
}

// pendingFile is a finished temporary file waiting to be renamed onto dst.
type pendingFile struct{ tmp, dst string }

// checkDataFile rejects data file names that are not a plain file in the
// model's folder, or that would overwrite the model itself.
func checkDataFile(loc, modelBase string) error {
	switch {
	case strings.ContainsRune(loc, 0):
		return fmt.Errorf("DataFile %q contains a NUL byte", loc)
	case loc == "." || loc == ".." || strings.ContainsAny(loc, `/\`) || filepath.Base(loc) != loc:
		return fmt.Errorf("DataFile %q must be a plain file name in the model's folder", loc)
	case loc == modelBase:
		return fmt.Errorf("DataFile %q is the model file itself", loc)
	}
	return nil
}

// writeTemp writes a new temporary file next to dst through fill and syncs
// it, returning its path. The file gets dst's permissions when dst exists.
func writeTemp(dst string, fill func(*bufio.Writer) error) (string, error) {
	dir, base := filepath.Dir(dst), filepath.Base(dst)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(name)
		return "", err
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	// Sync before the rename: otherwise a crash could leave the new name
	// pointing at a file whose blocks never reached the disk.
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// syncDir makes the renames durable where the platform allows; failure only
// weakens crash safety, so it is ignored.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// extent is where an external tensor's bytes lie in the data file.
type extent struct{ off, n int64 }

// encoder serializes one model. ext holds the tensors placed in the
// external data file called location.
type encoder struct {
	ext      map[*Tensor]extent
	location string
}

// planExternal assigns data-file offsets to every tensor of g (subgraphs
// included) with at least threshold bytes, in the order the model is
// written, and returns them in that order. A tensor shared by several
// values is stored once.
func (e *encoder) planExternal(g *Graph, threshold, align int64) ([]*Tensor, error) {
	e.ext = map[*Tensor]extent{}
	var order []*Tensor
	var off int64
	err := walkTensors(g, 0, func(t *Tensor) error {
		if _, done := e.ext[t]; done {
			return nil
		}
		if err := checkTensor(t); err != nil {
			return err
		}
		n := int64(len(t.Data))
		if n < threshold {
			return nil
		}
		off = (off + align - 1) / align * align
		e.ext[t] = extent{off: off, n: n}
		order = append(order, t)
		off += n
		return nil
	})
	return order, err
}

// walkTensors calls fn for every tensor of g and its subgraphs: the
// initializers, then each node's tensor attributes in attribute-name order.
func walkTensors(g *Graph, depth int, fn func(*Tensor) error) error {
	if depth > maxGraphDepth {
		return fmt.Errorf("graph %q: subgraphs nested deeper than %d levels", g.Name, maxGraphDepth)
	}
	for _, v := range g.Initializers {
		if v.Const == nil {
			return fmt.Errorf("graph %q: initializer %q has no tensor", g.Name, v.Name)
		}
		if err := fn(v.Const); err != nil {
			return fmt.Errorf("graph %q: initializer %q: %w", g.Name, v.Name, err)
		}
	}
	for _, n := range g.Nodes {
		for _, name := range sortedAttrNames(n.Attrs) {
			a := n.Attrs[name]
			var err error
			switch a.Kind {
			case KindTensor:
				if a.T != nil {
					err = fn(a.T)
				}
			case KindTensors:
				for _, t := range a.Tensors {
					if t != nil && err == nil {
						err = fn(t)
					}
				}
			case KindGraph:
				if a.G != nil {
					err = walkTensors(a.G, depth+1, fn)
				}
			case KindGraphs:
				for _, sg := range a.Graphs {
					if sg != nil && err == nil {
						err = walkTensors(sg, depth+1, fn)
					}
				}
			}
			if err != nil {
				return fmt.Errorf("graph %q: node %v attribute %q: %w", g.Name, n, name, err)
			}
		}
	}
	return nil
}

// writeData streams the planned tensors into the data file, zero-padding up
// to each aligned offset.
func (e *encoder) writeData(w *bufio.Writer, order []*Tensor) error {
	var pos int64
	var zeros [4096]byte
	for _, t := range order {
		x := e.ext[t]
		for pos < x.off {
			k := min(x.off-pos, int64(len(zeros)))
			if _, err := w.Write(zeros[:k]); err != nil {
				return err
			}
			pos += k
		}
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
		pos += x.n
	}
	return nil
}

// checkTensor verifies that a tensor can be written: a supported element
// type and data of exactly the size its dims need.
func checkTensor(t *Tensor) error {
	if t == nil {
		return fmt.Errorf("nil tensor")
	}
	switch t.Type {
	case dtype.Undefined, dtype.String:
		return fmt.Errorf("tensor %q: element type %v cannot be written", t.Name, t.Type)
	}
	if !t.Type.Valid() {
		return fmt.Errorf("tensor %q: unknown element type %d", t.Name, int32(t.Type))
	}
	if t.Data == nil && t.NumElements() != 0 {
		return fmt.Errorf("tensor %q has no data (was its model closed?)", t.Name)
	}
	return t.checkSize()
}

// ---- protobuf encoding ----
//
// Repeated scalar fields are written unpacked, as proto2 serializers do for
// onnx.proto, so that readers expecting the canonical encoding accept the
// files; fields are written in field-number order where that is free.

func pbTag(b []byte, field, wt int) []byte {
	return binary.AppendUvarint(b, uint64(field)<<3|uint64(wt))
}

// pbInt appends a varint field; negative values take ten bytes (two's
// complement), as protobuf encodes int64.
func pbInt(b []byte, field int, v int64) []byte {
	return binary.AppendUvarint(pbTag(b, field, wireVarint), uint64(v))
}

func pbFloat(b []byte, field int, f float32) []byte {
	return binary.LittleEndian.AppendUint32(pbTag(b, field, wireFixed32), math.Float32bits(f))
}

func pbBytes(b []byte, field int, p []byte) []byte {
	b = binary.AppendUvarint(pbTag(b, field, wireBytes), uint64(len(p)))
	return append(b, p...)
}

func pbString(b []byte, field int, s string) []byte {
	b = binary.AppendUvarint(pbTag(b, field, wireBytes), uint64(len(s)))
	return append(b, s...)
}

// pbStringOpt appends an optional string field, leaving empty ones out.
func pbStringOpt(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	return pbString(b, field, s)
}

// pbMessage appends a length-delimited field whose body fill appends. The
// body is encoded in place after a one-byte length guess and moved when the
// length needs more bytes, so nested messages are not built in buffers of
// their own and copied.
func pbMessage(b []byte, field int, fill func([]byte) ([]byte, error)) ([]byte, error) {
	b = pbTag(b, field, wireBytes)
	start := len(b)
	b = append(b, 0)
	b, err := fill(b)
	if err != nil {
		return b, err
	}
	n := len(b) - start - 1
	if n < 0x80 {
		b[start] = byte(n)
		return b, nil
	}
	if int64(n) > maxMessage {
		return b, fmt.Errorf("a message of %d bytes exceeds protobuf's 2 GiB limit (use WriteOptions.ExternalThreshold)", n)
	}
	var lb [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(lb[:], uint64(n))
	b = append(b, lb[:l-1]...)
	copy(b[start+l:], b[start+1:start+1+n])
	copy(b[start:], lb[:l])
	return b, nil
}

// OperatorSetIdProto and StringStringEntryProto field numbers (onnx.proto).
const (
	opsetDomain  = 1
	opsetVersion = 2
	entryKey     = 1
	entryValue   = 2
)

// ValueInfoProto, TypeProto and TensorShapeProto field numbers (onnx.proto).
const (
	viName     = 1
	viType     = 2
	viDoc      = 3
	typeTensor = 1
	ttElemType = 1
	ttShape    = 2
	shapeDim   = 1
	dimValue   = 1
	dimParam   = 2
)

const (
	locExternal  = 1 // TensorProto.DataLocation.EXTERNAL
	minIRNoInits = 4 // from this IR version on, initializers need not be graph inputs
)

// model encodes a ModelProto. The graph goes last so the small header
// fields need not be moved when the graph's length prefix is known.
func (e *encoder) model(m *Model) ([]byte, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("model has no graph")
	}
	// Sizing the buffer for the inline tensor bytes up front saves the
	// repeated grow-and-copy of append, which dominates otherwise (fresh
	// memory is costly to touch).
	var inline int
	_ = walkTensors(m.Graph, 0, func(t *Tensor) error {
		if _, ext := e.ext[t]; !ext {
			inline += len(t.Data) + 64
		}
		return nil
	})
	b := make([]byte, 0, inline+64<<10)
	if m.IRVersion != 0 {
		b = pbInt(b, mpIRVersion, m.IRVersion)
	}
	b = pbStringOpt(b, mpProducerName, m.Producer)
	b = pbStringOpt(b, mpProducerVersion, m.ProducerVersion)
	b = pbStringOpt(b, mpDomain, m.Domain)
	if m.ModelVersion != 0 {
		b = pbInt(b, mpModelVersion, m.ModelVersion)
	}
	b = pbStringOpt(b, mpDoc, m.Doc)
	for _, d := range sortedKeys(m.Opsets) {
		b, _ = pbMessage(b, mpOpsetImport, func(b []byte) ([]byte, error) {
			b = pbStringOpt(b, opsetDomain, d)
			return pbInt(b, opsetVersion, m.Opsets[d]), nil
		})
	}
	for _, k := range sortedKeys(m.Metadata) {
		b, _ = pbMessage(b, mpMetadataProps, func(b []byte) ([]byte, error) {
			b = pbString(b, entryKey, k)
			return pbString(b, entryValue, m.Metadata[k]), nil
		})
	}
	listInits := m.IRVersion > 0 && m.IRVersion < minIRNoInits
	b, err := pbMessage(b, mpGraph, func(b []byte) ([]byte, error) {
		return e.graph(b, m.Graph, 0, listInits)
	})
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxMessage {
		return nil, fmt.Errorf("the model is %d bytes inline, beyond protobuf's 2 GiB limit (use WriteOptions.ExternalThreshold)", len(b))
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// graph encodes a GraphProto's fields into b. listInits also lists the
// initializers as inputs (main graphs of IR < 4; never subgraphs, whose
// inputs are positional parameters).
func (e *encoder) graph(b []byte, g *Graph, depth int, listInits bool) ([]byte, error) {
	if depth > maxGraphDepth {
		return b, fmt.Errorf("graph %q: subgraphs nested deeper than %d levels", g.Name, maxGraphDepth)
	}
	var err error
	for _, n := range g.Nodes {
		if n == nil {
			return b, fmt.Errorf("graph %q: nil node", g.Name)
		}
		b, err = pbMessage(b, gpNode, func(b []byte) ([]byte, error) { return e.node(b, n, depth) })
		if err != nil {
			return b, fmt.Errorf("graph %q: node %v: %w", g.Name, n, err)
		}
	}
	b = pbStringOpt(b, gpName, g.Name)
	for _, v := range g.Initializers {
		if v == nil || v.Const == nil {
			return b, fmt.Errorf("graph %q: initializer %v has no tensor", g.Name, v)
		}
		b, err = pbMessage(b, gpInitializer, func(b []byte) ([]byte, error) { return e.tensor(b, v.Const, v.Name) })
		if err != nil {
			return b, fmt.Errorf("graph %q: initializer %q: %w", g.Name, v.Name, err)
		}
	}
	b = pbStringOpt(b, gpDoc, g.Doc)
	inputs := g.Inputs
	if listInits {
		inputs = append(append([]*Value(nil), g.Inputs...), g.Initializers...)
	}
	for _, v := range inputs {
		if v == nil {
			return b, fmt.Errorf("graph %q: nil input", g.Name)
		}
		b, _ = pbMessage(b, gpInput, func(b []byte) ([]byte, error) { return valueInfoBody(b, v), nil })
	}
	isOutput := make(map[*Value]bool, len(g.Outputs))
	for _, v := range g.Outputs {
		if v == nil {
			return b, fmt.Errorf("graph %q: nil output", g.Name)
		}
		isOutput[v] = true
		b, _ = pbMessage(b, gpOutput, func(b []byte) ([]byte, error) { return valueInfoBody(b, v), nil })
	}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v == nil || isOutput[v] || (v.Type == dtype.Undefined && shapeDims(v) == nil && v.Doc == "") {
				continue
			}
			b, _ = pbMessage(b, gpValueInfo, func(b []byte) ([]byte, error) { return valueInfoBody(b, v), nil })
		}
	}
	return b, nil
}

// node encodes a NodeProto's fields.
func (e *encoder) node(b []byte, n *Node, depth int) ([]byte, error) {
	if n.OpType == "" {
		return b, fmt.Errorf("no op type")
	}
	for _, v := range n.Inputs {
		b = pbString(b, npInput, valueName(v))
	}
	for _, v := range n.Outputs {
		b = pbString(b, npOutput, valueName(v))
	}
	b = pbStringOpt(b, npName, n.Name)
	b = pbString(b, npOpType, n.OpType)
	var err error
	for _, name := range sortedAttrNames(n.Attrs) {
		a := n.Attrs[name]
		if a == nil {
			return b, fmt.Errorf("attribute %q is nil", name)
		}
		b, err = pbMessage(b, npAttribute, func(b []byte) ([]byte, error) { return e.attr(b, name, a, depth) })
		if err != nil {
			return b, fmt.Errorf("attribute %q: %w", name, err)
		}
	}
	b = pbStringOpt(b, npDoc, n.Doc)
	return pbStringOpt(b, npDomain, normDomain(n.Domain)), nil
}

// valueName is how a node names an input or output; omitted optional ones
// are "".
func valueName(v *Value) string {
	if v == nil {
		return ""
	}
	return v.Name
}

// attr encodes an AttributeProto's fields. The attribute's name is its key
// in Node.Attrs, which is what lookups use.
func (e *encoder) attr(b []byte, name string, a *Attr, depth int) ([]byte, error) {
	b = pbString(b, apName, name)
	var err error
	switch a.Kind {
	case KindFloat:
		b = pbFloat(b, apF, a.F)
	case KindInt:
		b = pbInt(b, apI, a.I)
	case KindString:
		b = pbString(b, apS, a.S)
	case KindTensor:
		if a.T == nil {
			return b, fmt.Errorf("kind TENSOR without a tensor")
		}
		b, err = pbMessage(b, apT, func(b []byte) ([]byte, error) { return e.tensor(b, a.T, a.T.Name) })
	case KindGraph:
		if a.G == nil {
			return b, fmt.Errorf("kind GRAPH without a graph")
		}
		b, err = pbMessage(b, apG, func(b []byte) ([]byte, error) { return e.graph(b, a.G, depth+1, false) })
	case KindFloats:
		for _, f := range a.Floats {
			b = pbFloat(b, apFloats, f)
		}
	case KindInts:
		for _, i := range a.Ints {
			b = pbInt(b, apInts, i)
		}
	case KindStrings:
		for _, s := range a.Strings {
			b = pbString(b, apStrings, s)
		}
	case KindTensors:
		for i, t := range a.Tensors {
			if t == nil {
				return b, fmt.Errorf("tensor %d is nil", i)
			}
			if b, err = pbMessage(b, apTensors, func(b []byte) ([]byte, error) { return e.tensor(b, t, t.Name) }); err != nil {
				break
			}
		}
	case KindGraphs:
		for i, g := range a.Graphs {
			if g == nil {
				return b, fmt.Errorf("graph %d is nil", i)
			}
			if b, err = pbMessage(b, apGraphs, func(b []byte) ([]byte, error) { return e.graph(b, g, depth+1, false) }); err != nil {
				break
			}
		}
	default:
		return b, fmt.Errorf("kind %v cannot be written", a.Kind)
	}
	if err != nil {
		return b, err
	}
	b = pbStringOpt(b, apDoc, a.Doc)
	return pbInt(b, apType, int64(a.Kind)), nil
}

// tensor encodes a TensorProto's fields under the given name: raw_data for
// inline tensors, external_data entries for planned ones.
func (e *encoder) tensor(b []byte, t *Tensor, name string) ([]byte, error) {
	if err := checkTensor(t); err != nil {
		return b, err
	}
	for _, d := range t.Dims {
		b = pbInt(b, tpDims, d)
	}
	b = pbInt(b, tpDataType, int64(t.Type))
	b = pbStringOpt(b, tpName, name)
	x, ok := e.ext[t]
	if !ok {
		return pbBytes(b, tpRawData, t.Data), nil
	}
	for _, kv := range [][2]string{
		{"location", e.location},
		{"offset", strconv.FormatInt(x.off, 10)},
		{"length", strconv.FormatInt(x.n, 10)},
	} {
		b, _ = pbMessage(b, tpExternalData, func(b []byte) ([]byte, error) {
			return pbString(pbString(b, entryKey, kv[0]), entryValue, kv[1]), nil
		})
	}
	return pbInt(b, tpDataLocation, locExternal), nil
}

// valueInfoBody encodes a ValueInfoProto's fields. The type is left out
// when neither element type nor rank is known; the shape when the rank is
// unknown.
func valueInfoBody(b []byte, v *Value) []byte {
	b = pbString(b, viName, v.Name)
	dims := shapeDims(v)
	if v.Type != dtype.Undefined || dims != nil {
		b, _ = pbMessage(b, viType, func(b []byte) ([]byte, error) {
			return pbMessage(b, typeTensor, func(b []byte) ([]byte, error) {
				if v.Type != dtype.Undefined {
					b = pbInt(b, ttElemType, int64(v.Type))
				}
				if dims == nil {
					return b, nil
				}
				return pbMessage(b, ttShape, func(b []byte) ([]byte, error) {
					for _, d := range dims {
						b, _ = pbMessage(b, shapeDim, func(b []byte) ([]byte, error) {
							switch {
							case d.Param != "":
								return pbString(b, dimParam, d.Param), nil
							case d.Value >= 0:
								return pbInt(b, dimValue, d.Value), nil
							}
							return b, nil // neither: an axis of unknown size
						})
					}
					return b, nil
				})
			})
		})
	}
	return pbStringOpt(b, viDoc, v.Doc)
}

// shapeDims is the shape written for v: the inferred Shape when set (constant
// dims as sizes, symbolic ones named by their expression's text), else the
// Declared dims. nil means the rank is unknown.
func shapeDims(v *Value) []Dim {
	if v.Shape == nil {
		return v.Declared
	}
	out := make([]Dim, len(v.Shape))
	for i, x := range v.Shape {
		if c, ok := x.Const(); ok {
			out[i] = Dim{Value: max(c, -1)}
			continue
		}
		if x.IsValid() {
			out[i] = Dim{Value: -1, Param: x.String()}
			continue
		}
		// Inference could not describe this axis; what the file said about
		// it is still true.
		out[i] = Dim{Value: -1}
		if len(v.Declared) == len(v.Shape) {
			out[i] = v.Declared[i]
		}
	}
	return out
}
