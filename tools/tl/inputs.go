package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/symshape"
)

// maxJSONInputBytes bounds an --inputs JSON file: JSON numbers take ~10
// bytes each, so this is ~25M elements, beyond which .npy is the format.
const maxJSONInputBytes = 256 << 20

// jsonTensor is one input of an --inputs file.json, the name -> {dims,
// type, data} form ONNX Runtime users write.
type jsonTensor struct {
	Dims []int            `json:"dims"`
	Type string           `json:"type"`
	Data *json.RawMessage `json:"data"`
}

// readInputsJSON reads name -> {dims, type, data} from path.
func readInputsJSON(path string) (map[string]*tensor.Dense, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxJSONInputBytes {
		return nil, fmt.Errorf("%s is %d MiB; JSON inputs are read up to %d MiB: give large tensors as .npy files in a folder (--inputs DIR)", path, fi.Size()>>20, maxJSONInputBytes>>20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]jsonTensor
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w (want {\"name\": {\"dims\": [1, 3], \"type\": \"float32\", \"data\": [...]}})", path, err)
	}
	out := map[string]*tensor.Dense{}
	for name, jt := range raw {
		t, err := jt.dense()
		if err != nil {
			return nil, fmt.Errorf("%s: input %q: %w", path, name, err)
		}
		out[name] = t
	}
	return out, nil
}

func (jt jsonTensor) dense() (*tensor.Dense, error) {
	n := 1
	for _, d := range jt.Dims {
		if d < 0 {
			return nil, fmt.Errorf("negative dim in %v", jt.Dims)
		}
		n *= d
		if n > maxJSONInputBytes {
			return nil, fmt.Errorf("dims %v are too many elements for a JSON input", jt.Dims)
		}
	}
	if jt.Data == nil {
		return nil, fmt.Errorf("no \"data\"")
	}
	var backing any
	var err error
	switch strings.ToLower(jt.Type) {
	case "float32", "float", "float16", "":
		backing, err = decodeData[float32](*jt.Data, n)
	case "float64", "double":
		backing, err = decodeData[float64](*jt.Data, n)
	case "int64":
		backing, err = decodeData[int64](*jt.Data, n)
	case "int32":
		backing, err = decodeData[int32](*jt.Data, n)
	case "int8":
		backing, err = decodeData[int8](*jt.Data, n)
	case "uint8":
		backing, err = decodeData[uint8](*jt.Data, n)
	case "bool":
		backing, err = decodeData[bool](*jt.Data, n)
	default:
		return nil, fmt.Errorf("type %q: want float32, float16, float64, int64, int32, int8, uint8 or bool", jt.Type)
	}
	if err != nil {
		return nil, err
	}
	return engine.Tensor{Shape: jt.Dims, Data: backing}.Dense()
}

// decodeData reads a flat or nested JSON array of n numbers.
func decodeData[T float32 | float64 | int64 | int32 | int8 | uint8 | bool](raw json.RawMessage, n int) ([]T, error) {
	var flat []T
	if err := json.Unmarshal(raw, &flat); err != nil {
		// Nested lists, as numpy's tolist() writes them: flatten.
		var nested any
		if json.Unmarshal(raw, &nested) != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		flat = flat[:0]
		var walk func(v any) error
		walk = func(v any) error {
			switch x := v.(type) {
			case []any:
				for _, e := range x {
					if err := walk(e); err != nil {
						return err
					}
				}
			default:
				b, _ := json.Marshal(x)
				var t T
				if err := json.Unmarshal(b, &t); err != nil {
					return fmt.Errorf("data element %s: %w", b, err)
				}
				flat = append(flat, t)
			}
			return nil
		}
		if err := walk(nested); err != nil {
			return nil, err
		}
	}
	if len(flat) != n {
		return nil, fmt.Errorf("dims hold %d elements, data has %d", n, len(flat))
	}
	return flat, nil
}

// readInputsDir reads <name>.npy (or input.<name>.npy, the testdata
// layout) for each of the session's inputs found in dir; names are
// sanitised as --out writes them, so one run's outputs can feed the next.
func readInputsDir(dir string, ports []engine.Port) (map[string]*tensor.Dense, error) {
	out := map[string]*tensor.Dense{}
	for _, p := range ports {
		for _, f := range []string{sanitize(p.Name) + ".npy", "input." + sanitize(p.Name) + ".npy"} {
			path := filepath.Join(dir, f)
			if _, err := os.Stat(path); err != nil {
				continue
			}
			t, err := npy.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("input %s: %w", p.Name, err)
			}
			out[p.Name] = t
			break
		}
	}
	return out, nil
}

// fillEmptyPast makes the past key/value inputs that were not given as
// empty tensors (past length 0): what a decoder's first step takes. An
// input is filled only when its shape, with the symbols the given inputs
// bind and every other symbol 0, holds no elements.
func fillEmptyPast(ports []engine.Port, feeds map[string]*tensor.Dense) []string {
	b := symshape.Binding{}
	for _, p := range ports {
		t, ok := feeds[p.Name]
		if !ok {
			continue
		}
		for i, d := range p.Shape {
			if name, bare := d.SymName(); bare && i < len(t.Shape()) {
				b[name] = int64(t.Shape()[i])
			}
		}
	}
	var made []string
	for _, p := range ports {
		if _, ok := feeds[p.Name]; ok || !strings.Contains(strings.ToLower(p.Name), "past") {
			continue
		}
		bb := symshape.Binding{}
		for k, v := range b {
			bb[k] = v
		}
		shape := make([]int, len(p.Shape))
		empty := false
		ok := true
		for i, d := range p.Shape {
			for _, s := range d.Symbols() {
				if _, bound := bb[s]; !bound {
					bb[s] = 0
				}
			}
			v, err := d.Eval(bb)
			if err != nil || v < 0 {
				ok = false
				break
			}
			shape[i] = int(v)
			empty = empty || v == 0
		}
		if !ok || !empty {
			continue
		}
		t, err := syntheticInput(p, shape, 0)
		if err != nil {
			continue
		}
		feeds[p.Name] = t
		made = append(made, p.Name)
	}
	sort.Strings(made)
	return made
}
