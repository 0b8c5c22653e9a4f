package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/opencl"
)

// testLib is shared by every kernel test: building programs is the slow part
// on PoCL, and one device keeps their cache warm across tests.
var testLib *Lib

func TestMain(m *testing.M) {
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		// Kernel tests are the point of this package: no device is a failure,
		// not a skip (install pocl-opencl-icd for a CPU device).
		fmt.Fprintln(os.Stderr, "kernels tests need an OpenCL device:", err)
		os.Exit(1)
	}
	testLib = New(dev)
	code := m.Run()
	dev.Close()
	os.Exit(code)
}

// upload stores xs on the device in storage s and returns the buffer with a
// non-zero element offset, so every test also checks that launchers honour
// Buf.Off.
func upload(t testing.TB, s Storage, xs []float32) Buf {
	t.Helper()
	const pad = 3
	raw := make([]byte, (len(xs)+pad+1)*s.Size())
	for i, x := range xs {
		putElem(raw, s, pad+i, x)
	}
	mem, err := testLib.Device().Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Release)
	if err := testLib.Device().Write(mem, 0, raw); err != nil {
		t.Fatal(err)
	}
	return Buf{Mem: mem, Off: pad}
}

// alloc returns a zeroed device tensor of n elements at a non-zero offset.
func alloc(t testing.TB, s Storage, n int) Buf {
	return upload(t, s, make([]float32, n))
}

// download reads n elements of b back as float32.
func download(t testing.TB, s Storage, b Buf, n int) []float32 {
	t.Helper()
	if err := testLib.Device().Finish(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, n*s.Size())
	if err := testLib.Device().Read(b.Mem, b.Off*s.Size(), raw); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = getElem(raw, s, i)
	}
	return out
}

func putElem(raw []byte, s Storage, i int, x float32) {
	if s == F16 {
		binary.LittleEndian.PutUint16(raw[2*i:], dtype.Float32ToHalf(x))
		return
	}
	binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
}

func getElem(raw []byte, s Storage, i int) float32 {
	if s == F16 {
		return dtype.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
}

// roundTrip is what storage s does to x, so references can be compared
// against device results that went through fp16 storage.
func roundTrip(s Storage, x float32) float32 {
	if s == F16 {
		return dtype.HalfToFloat32(dtype.Float32ToHalf(x))
	}
	return x
}

// randVec returns n values uniform in [-1, 1) from a fixed seed.
func randVec(seed int64, n int) []float32 {
	r := rand.New(rand.NewSource(seed))
	out := make([]float32, n)
	for i := range out {
		out[i] = r.Float32()*2 - 1
	}
	return out
}

// assertClose fails unless |got-want| <= atol + rtol*|want| elementwise, and
// names the first bad index.
func assertClose(t testing.TB, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if math.Abs(g-w) > atol+rtol*math.Abs(w) || math.IsNaN(g) != math.IsNaN(w) {
			t.Fatalf("%s: element %d = %v, want %v (atol %g rtol %g)", what, i, g, w, atol, rtol)
		}
	}
}

// storages is the set of storages every family is tested in.
var storages = []Storage{F32, F16}
