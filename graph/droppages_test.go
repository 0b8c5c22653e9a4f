package graph

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// pageSink keeps the reads that fault pages in from being optimised away.
var pageSink int

// TestMappedAndDropPages checks that Mapped tells file-mapped initializer
// bytes from other memory, and that DropPages takes a mapped tensor's pages
// out of the resident set while its contents stay readable.
func TestMappedAndDropPages(t *testing.T) {
	const n, rows, cols = 2, 1024, 1024 // 4 MiB per weight
	dir := t.TempDir()
	path := writeBigModel(t, dir, n, rows, cols)
	// Real bytes in w1 (the file is sparse): holes may map a shared zero
	// page that never counts as resident.
	f, err := os.OpenFile(filepath.Join(dir, "weights.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{1, 2, 3, 4}, rows*cols), rows*cols*4); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w := m.Graph.Value("w1").Const.Data
	if !m.Mapped(w) || !m.Mapped(w[100:200]) {
		t.Fatalf("an external weight is not reported as mapped")
	}
	if m.Mapped(make([]byte, 64)) || m.Mapped(nil) {
		t.Fatalf("Go memory reported as mapped")
	}
	// A slice reaching past the mapping's end is not inside it.
	if tail := w[len(w)-8:]; m.Mapped(tail[:8:8]) != true {
		t.Fatalf("the last bytes of the mapping are not reported as mapped")
	}

	want := append([]byte(nil), w[:8]...)
	for i := 0; i < len(w); i += 4096 {
		pageSink += int(w[i]) // touch every page
	}
	before := vmRSS(t)
	if err := m.DropPages(w); err != nil {
		t.Fatal(err)
	}
	after := vmRSS(t)
	if runtime.GOOS == "linux" && before-after < int64(len(w))/2 {
		t.Errorf("DropPages of a %d-byte resident weight lowered VmRSS by %d bytes", len(w), before-after)
	}
	if !bytes.Equal(w[:8], want) {
		t.Fatalf("after DropPages the weight reads %v, want %v", w[:8], want)
	}
	// Memory outside the mappings is left alone.
	heap := bytes.Repeat([]byte{7}, 3*4096)
	if err := m.DropPages(heap); err != nil || heap[5000] != 7 {
		t.Fatalf("DropPages of Go memory: %v, byte %d", err, heap[5000])
	}

	// A model parsed from memory has no mapping.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := Parse(data, filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	if pm.Mapped(data[:16]) {
		t.Fatalf("bytes of a model parsed from memory reported as mapped")
	}
}
