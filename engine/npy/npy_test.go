package npy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gorgonia.org/tensor"
)

func TestRoundTrip(t *testing.T) {
	cases := []*tensor.Dense{
		tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, -2, 3.5, 0, 5, 6})),
		tensor.New(tensor.WithShape(4), tensor.WithBacking([]int64{1, -1, 1 << 40, 0})),
		tensor.New(tensor.WithShape(1, 2, 1), tensor.WithBacking([]bool{true, false})),
		tensor.New(tensor.WithShape(3), tensor.WithBacking([]int32{7, 8, -9})),
		tensor.New(tensor.WithShape(2), tensor.WithBacking([]uint8{0, 255})),
	}
	for _, c := range cases {
		var buf bytes.Buffer
		if err := Write(&buf, c); err != nil {
			t.Fatal(err)
		}
		if (buf.Len()-c.DataSize()*int(c.Dtype().Size()))%64 != 0 {
			t.Errorf("%v: header not padded to 64 bytes", c.Shape())
		}
		got, err := Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(got.Shape(), c.Shape()) || !cmp.Equal(got.Data(), c.Data()) {
			t.Errorf("round trip: got %v %v, want %v %v", got.Shape(), got.Data(), c.Shape(), c.Data())
		}
	}
}

func TestHostileHeaders(t *testing.T) {
	bad := [][]byte{
		nil,
		[]byte("\x93NUMPY"),
		[]byte("\x93NUMPY\x01\x00\xff\xff{'descr'"),
		[]byte("\x93NUMPX\x01\x00\x10\x00{'descr': '<f4'}"),
		append([]byte("\x93NUMPY\x01\x00\x46\x00"), []byte("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }")...),
		append([]byte("\x93NUMPY\x01\x00\x3c\x00"), []byte("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }    ")...),
		append([]byte("\x93NUMPY\x01\x00\x3b\x00"), []byte("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }")...),
	}
	for i, b := range bad {
		if _, err := Read(bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("case %d: expected an error", i)
		}
	}
}

// NumPy is the authority on the format: files it writes must read back with
// the values it printed.
func TestReadsNumPyFiles(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("Debian's python3 with numpy is required (tools/setup.sh installs it): %v", err)
	}
	dir := t.TempDir()
	script := `
import numpy as np, sys
d = sys.argv[1]
np.save(d + "/f.npy", np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
np.save(d + "/h.npy", np.array([1.5, -2, 65504], dtype=np.float16))
np.save(d + "/b.npy", np.array([[3, -4]], dtype='>i8'))
np.save(d + "/s.npy", np.float32(7))
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	check := func(name string, shape []int, want any) {
		got, err := ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal([]int(got.Shape()), shape) || !cmp.Equal(got.Data(), want) {
			t.Errorf("%s: got %v %v, want %v %v", name, got.Shape(), got.Data(), shape, want)
		}
	}
	check("f.npy", []int{2, 3}, []float32{0, 0.25, 0.5, 0.75, 1, 1.25})
	check("h.npy", []int{3}, []float32{1.5, -2, 65504})
	check("b.npy", []int{1, 2}, []int64{3, -4})
	got, err := ReadFile(filepath.Join(dir, "s.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Shape().IsScalar() {
		t.Errorf("scalar: shape %v", got.Shape())
	}
}

// TestWriteEmpty: a tensor with no elements writes as a header only and
// reads back with its shape and type (gorgonia's Data panics on such a
// tensor, so ToBytes must not call it).
func TestWriteEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.npy")
	e := tensor.New(tensor.WithShape(2, 0), tensor.Of(tensor.Int64))
	if err := WriteFile(path, e); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Dtype() != tensor.Int64 || len(back.Shape()) != 2 || back.Shape()[0] != 2 || back.Shape()[1] != 0 {
		t.Errorf("read back %v %v", back.Dtype(), back.Shape())
	}
}
