package graph

import (
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

func TestParseTensor(t *testing.T) {
	f32 := pb(nil).v(1, 2).v(1, 2).v(2, int64(dtype.Float32)).s(8, "x")
	for _, v := range []float32{1, -2, 3.5, 0} {
		f32 = f32.f32(4, v)
	}
	cases := []struct {
		name    string
		msg     pb
		dims    []int64
		want    []float32
		wantI64 []int64
		err     string
	}{
		{name: "typed float_data", msg: f32, dims: []int64{2, 2}, want: []float32{1, -2, 3.5, 0}},
		{name: "raw int64", msg: tensorRaw("i", dtype.Int64, []int64{3}, []byte{
			1, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 0, 0, 0, 0}),
			dims: []int64{3}, wantI64: []int64{1, -2, 7}},
		{name: "scalar no data is an error", msg: dimsField(nil, nil).v(2, int64(dtype.Float32)), err: "no data"},
		{name: "empty", msg: dimsField(nil, []int64{0, 3}).v(2, int64(dtype.Float32)), dims: []int64{0, 3}, want: []float32{}},
		{name: "raw size mismatch", msg: tensorRaw("r", dtype.Float32, []int64{2}, []byte{1, 2, 3}), err: "raw_data has 3 bytes"},
		{name: "external refused", msg: tensorExt("e", dtype.Float32, []int64{1}, "w.bin", "", ""), err: "without a folder"},
		{name: "truncated", msg: f32[:len(f32)-2], err: "tensor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x, err := ParseTensor(c.msg)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(x.Dims) != len(c.dims) {
				t.Fatalf("dims %v, want %v", x.Dims, c.dims)
			}
			for i := range c.dims {
				if x.Dims[i] != c.dims[i] {
					t.Fatalf("dims %v, want %v", x.Dims, c.dims)
				}
			}
			if c.wantI64 != nil {
				got, err := x.Int64s()
				if err != nil {
					t.Fatal(err)
				}
				for i := range c.wantI64 {
					if got[i] != c.wantI64[i] {
						t.Fatalf("values %v, want %v", got, c.wantI64)
					}
				}
				return
			}
			got, err := x.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d values, want %d", len(got), len(c.want))
			}
			for i := range c.want {
				if got[i] != c.want[i] {
					t.Fatalf("values %v, want %v", got, c.want)
				}
			}
		})
	}
}
