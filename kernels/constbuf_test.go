package kernels

import (
	"bytes"
	"syscall"
	"testing"
)

// TestConstPlacer checks the OpenCL library's constant placement: a view
// over aligned memory outside the Go heap reads back in place, a
// misaligned start is declined (ok false, no error) so the caller copies,
// and AllocFilled holds what its fill wrote.
func TestConstPlacer(t *testing.T) {
	if !testLib.SharesHostMemory() {
		t.Fatalf("PoCL's CPU device does not report shared host memory")
	}
	mem, err := syscall.Mmap(-1, 0, 3*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("anonymous mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	for i := range mem {
		mem[i] = byte(i * 13)
	}
	b, ok, err := testLib.AllocView(mem[4096 : 2*4096])
	if err != nil || !ok {
		t.Fatalf("AllocView of a page-aligned range: ok %v, %v", ok, err)
	}
	got := make([]byte, 4096)
	if err := testLib.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	testLib.Release(b)
	if !bytes.Equal(got, mem[4096:2*4096]) {
		t.Errorf("the view does not read the host bytes")
	}
	if _, ok, err := testLib.AllocView(mem[4:4100]); ok || err != nil {
		t.Errorf("AllocView of a 4-byte-aligned start: ok %v, %v; want declined", ok, err)
	}
	if _, _, err := testLib.AllocView(nil); err == nil {
		t.Errorf("AllocView of no bytes succeeded")
	}

	fb, err := testLib.AllocFilled(1000, func(dst []byte) error {
		for i := range dst {
			dst[i] = byte(255 - i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer testLib.Release(fb)
	got = make([]byte, 1000)
	if err := testLib.Read(fb, 0, got); err != nil {
		t.Fatal(err)
	}
	for i, x := range got {
		if x != byte(255-i) {
			t.Fatalf("byte %d is %d, want %d", i, x, byte(255-i))
		}
	}
}
