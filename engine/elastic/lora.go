package elastic

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tlite/tlite/engine"
)

// LoRADir is the folder beside the model that holds the adapters.
const LoRADir = "lora"

// loraMagic opens every adapter file (models/elastic/lora.py writes them).
var loraMagic = [8]byte{'T', 'L', 'L', 'O', 'R', 'A', 0, 0}

// LoRAVersion is the adapter file version ReadLoRA accepts.
const LoRAVersion = 1

// Bounds that keep a corrupt header from asking for absurd allocations.
const (
	maxLoRARank   = 1024
	maxLoRALayers = 4096
	maxLoRADim    = 1 << 20
	maxLoRABytes  = 1 << 31
)

// loraHeaderFixed is the size of the fixed part of the header: magic,
// version, level, rank, alpha, layers, targets.
const loraHeaderFixed = 8 + 6*4

// LoRAMatrix is one target's adapter: A [In, Rank] and B [Rank, Out],
// row-major.
type LoRAMatrix struct {
	In, Out int
	A, B    []float32
}

// LoRA is one level's adapters, as models/elastic/lora.py writes them to
// lora/level-XX.bin (its doc gives the byte layout).
type LoRA struct {
	Path    string
	Level   int
	Rank    int
	Alpha   float32
	Targets []string       // product roles: q, k, v, o, gate, up, down
	Layers  [][]LoRAMatrix // [layer][target]
}

// loraRoles are the roles an adapter may target (elastic.json's weight keys).
var loraRoles = map[string]bool{"q": true, "k": true, "v": true, "o": true, "gate": true, "up": true, "down": true}

// ReadLoRA reads and checks one adapter file. Every size is checked
// against the file's length before anything is allocated for it, and the
// CRC-32 trailer must match; errors name the file and the field.
func ReadLoRA(path string) (*LoRA, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("elastic: LoRA: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("elastic: LoRA: %w", err)
	}
	size := st.Size()
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("elastic: LoRA file %s: %s: %s", path, field, fmt.Sprintf(format, a...))
	}
	if size < loraHeaderFixed+4 {
		return nil, bad("header", "the file has %d bytes; the fixed header alone is %d", size, loraHeaderFixed+4)
	}
	if size > maxLoRABytes {
		return nil, bad("size", "%d bytes is more than an adapter file may hold (%d)", size, int64(maxLoRABytes))
	}
	raw := make([]byte, size)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, fmt.Errorf("elastic: LoRA file %s: %w", path, err)
	}
	if !strings.HasPrefix(string(raw[:8]), string(loraMagic[:])) {
		return nil, bad("magic", "%q; want %q (not a tlite LoRA file)", raw[:8], loraMagic[:])
	}
	u32 := func(at int) uint32 { return binary.LittleEndian.Uint32(raw[at:]) }
	if v := u32(8); v != LoRAVersion {
		return nil, bad("version", "%d; this build reads version %d", v, LoRAVersion)
	}
	l := &LoRA{Path: path, Level: int(u32(12)), Rank: int(u32(16)), Alpha: math.Float32frombits(u32(20))}
	layers, targets := int(u32(24)), int(u32(28))
	switch {
	case l.Level < 1 || l.Level > 100:
		return nil, bad("level", "%d is outside 1..100", l.Level)
	case l.Rank < 1 || l.Rank > maxLoRARank:
		return nil, bad("rank", "%d is outside 1..%d", l.Rank, maxLoRARank)
	case math.IsNaN(float64(l.Alpha)) || math.IsInf(float64(l.Alpha), 0) || l.Alpha == 0:
		return nil, bad("alpha", "%v is not a finite nonzero number", l.Alpha)
	case layers < 1 || layers > maxLoRALayers:
		return nil, bad("n_layers", "%d is outside 1..%d", layers, maxLoRALayers)
	case targets < 1 || targets > len(loraRoles):
		return nil, bad("n_targets", "%d is outside 1..%d", targets, len(loraRoles))
	}
	at := loraHeaderFixed
	tableEnd := int64(at) + int64(targets)*8 + int64(layers)*int64(targets)*8
	if tableEnd+4 > size {
		return nil, bad("header", "%d targets over %d layers need a %d-byte header; the file has %d bytes", targets, layers, tableEnd, size)
	}
	seen := map[string]bool{}
	for t := 0; t < targets; t++ {
		name := strings.TrimRight(string(raw[at:at+8]), "\x00")
		if !loraRoles[name] || seen[name] {
			return nil, bad(fmt.Sprintf("target %d", t), "%q is not a product role (q, k, v, o, gate, up, down) or is repeated", name)
		}
		seen[name] = true
		l.Targets = append(l.Targets, name)
		at += 8
	}
	type shape struct{ in, out int }
	shapes := make([]shape, layers*targets)
	data := tableEnd
	for i := range shapes {
		in, out := int(u32(at)), int(u32(at+4))
		if in < 1 || in > maxLoRADim || out < 1 || out > maxLoRADim {
			return nil, bad(fmt.Sprintf("layer %d %s shape", i/targets, l.Targets[i%targets]), "[%d, %d] is outside 1..%d", in, out, maxLoRADim)
		}
		shapes[i] = shape{in, out}
		data += 4 * int64(l.Rank) * int64(in+out)
		at += 8
	}
	if data+4 != size {
		return nil, bad("size", "the header describes %d bytes with the CRC; the file has %d", data+4, size)
	}
	if got, want := crc32.ChecksumIEEE(raw[:size-4]), u32(int(size-4)); got != want {
		return nil, bad("crc32", "the contents hash to %08x; the trailer says %08x", got, want)
	}
	floats := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(u32(at + 4*i))
		}
		at += 4 * n
		return v
	}
	for li := 0; li < layers; li++ {
		row := make([]LoRAMatrix, targets)
		for t := range row {
			sh := shapes[li*targets+t]
			row[t] = LoRAMatrix{In: sh.in, Out: sh.out, A: floats(sh.in * l.Rank), B: floats(l.Rank * sh.out)}
			for _, v := range [][]float32{row[t].A, row[t].B} {
				for _, x := range v {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						return nil, bad(fmt.Sprintf("layer %d %s", li, l.Targets[t]), "holds a value that is not finite")
					}
				}
			}
		}
		l.Layers = append(l.Layers, row)
	}
	return l, nil
}

// check verifies the adapters fit spec's model: the layer count, a level
// the model has, and each target's shape against the layer's products.
func (l *LoRA) check(spec *Spec) error {
	if len(l.Layers) != spec.NLayers {
		return fmt.Errorf("elastic: LoRA file %s: n_layers %d; the model has %d", l.Path, len(l.Layers), spec.NLayers)
	}
	if _, err := spec.LevelOf(l.Level); err != nil {
		return fmt.Errorf("elastic: LoRA file %s: level: %w", l.Path, err)
	}
	q, kv, ffn := spec.NHeads*spec.HeadDim, spec.NKVHeads*spec.HeadDim, spec.FFN
	for li, row := range l.Layers {
		for t, m := range row {
			role := l.Targets[t]
			// spec.Dim is 0 when elastic.json does not record it; the
			// engine checks every shape against the products anyway.
			wantIn, wantOut := spec.Dim, spec.Dim
			switch role {
			case "q":
				wantOut = q
			case "k", "v":
				wantOut = kv
			case "o":
				wantIn = q
			case "gate", "up":
				wantOut = ffn
			case "down":
				wantIn = ffn
			}
			if (wantIn > 0 && m.In != wantIn) || (wantOut > 0 && m.Out != wantOut) {
				return fmt.Errorf("elastic: LoRA file %s: layer %d %s shape [%d, %d] does not fit the model (%d/%d heads of %d, FFN %d)",
					l.Path, li, role, m.In, m.Out, spec.NHeads, spec.NKVHeads, spec.HeadDim, spec.FFN)
			}
		}
	}
	return nil
}

// engineLayers turns the adapters into the engine's per-layer sets.
func (l *LoRA) engineLayers() []engine.LoRALayer {
	scale := l.Alpha / float32(l.Rank)
	out := make([]engine.LoRALayer, len(l.Layers))
	for li, row := range l.Layers {
		for t, m := range row {
			ad := &engine.LoRAAdapter{Rank: l.Rank, Scale: scale, A: m.A, B: m.B}
			switch l.Targets[t] {
			case "q":
				out[li].Q = ad
			case "k":
				out[li].K = ad
			case "v":
				out[li].V = ad
			case "o":
				out[li].O = ad
			case "gate":
				out[li].Gate = ad
			case "up":
				out[li].Up = ad
			case "down":
				out[li].Down = ad
			}
		}
	}
	return out
}

// ReadLoRADir reads every level-*.bin in dir and checks it against spec.
// A missing folder is no adapters (nil, nil); two files of one level are
// an error.
func ReadLoRADir(dir string, spec *Spec) ([]*LoRA, error) {
	names, err := filepath.Glob(filepath.Join(dir, "level-*.bin"))
	if err != nil {
		return nil, fmt.Errorf("elastic: LoRA: %w", err)
	}
	sort.Strings(names)
	var out []*LoRA
	byLevel := map[int]string{}
	for _, n := range names {
		l, err := ReadLoRA(n)
		if err != nil {
			return nil, err
		}
		if err := l.check(spec); err != nil {
			return nil, err
		}
		if prev, dup := byLevel[l.Level]; dup {
			return nil, fmt.Errorf("elastic: LoRA: %s and %s are both level %d", prev, n, l.Level)
		}
		byLevel[l.Level] = n
		out = append(out, l)
	}
	return out, nil
}

// AttachLoRA uploads each level's adapters (all stay resident; they are
// small) so that SetLevel switches them with the level. A level without
// adapters runs its plain prefix. It returns the levels that have
// adapters. The current level's adapters are attached at once.
func (m *Model) AttachLoRA(sets []*LoRA) ([]int, error) {
	var levels []int
	for _, l := range sets {
		if err := l.check(m.Spec); err != nil {
			return nil, err
		}
		if _, dup := m.lora[l.Level]; dup {
			return nil, fmt.Errorf("elastic: LoRA for level %d attached twice", l.Level)
		}
	}
	for _, l := range sets {
		id, err := m.b.AddLoRA(l.engineLayers())
		if err != nil {
			return nil, fmt.Errorf("elastic: LoRA file %s: %w", l.Path, err)
		}
		m.lora[l.Level] = id
		levels = append(levels, l.Level)
	}
	sort.Ints(levels)
	return levels, m.SetLevel(m.current)
}

// LoRASets is how many adapter sets are attached (one per level at most).
func (m *Model) LoRASets() int { return len(m.lora) }

// HasLoRA reports whether level pct has adapters attached.
func (m *Model) HasLoRA(pct int) bool {
	_, ok := m.lora[pct]
	return ok
}
