package graph

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// vmRSS reads the resident set size in bytes from /proc/self/status.
func vmRSS(tb testing.TB) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, _ := strconv.ParseInt(string(f[1]), 10, 64)
			return kb << 10
		}
	}
	tb.Skip("no VmRSS line")
	return 0
}

// BenchmarkLoadExternal1GB loads a model whose 16 float32 initializers of
// 64 MiB each live in one 1 GiB external file, and reports how much the Go
// heap and the RSS grow per Load. The file is sparse (contents zero): the point
// is that Load maps it instead of reading or copying it.
// writeBigModel writes model.onnx in dir: a chain of n MatMuls whose float32
// [rows, cols] weights lie back to back in one sparse external file (contents
// zero except a 4-byte marker i+1 at the start of tensor i).
func writeBigModel(tb testing.TB, dir string, n, rows, cols int) string {
	each := int64(rows) * int64(cols) * 4
	f, err := os.Create(filepath.Join(dir, "weights.bin"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(n) * each); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := f.WriteAt(le32f(float32(i+1)), int64(i)*each); err != nil {
			tb.Fatal(err)
		}
	}
	g := graphMsg{name: "big"}
	prev := "x"
	for i := 0; i < n; i++ {
		w := fmt.Sprintf("w%d", i)
		out := fmt.Sprintf("h%d", i)
		g.inits = append(g.inits, tensorExt(w, dtype.Float32, []int64{int64(rows), int64(cols)}, "weights.bin",
			strconv.FormatInt(int64(i)*each, 10), strconv.FormatInt(each, 10)))
		g.nodes = append(g.nodes, node("", "MatMul", []string{prev, w}, []string{out}))
		prev = out
	}
	g.inputs = []pb{vinfo("x", dtype.Float32, "batch", rows)}
	g.outputs = []pb{vinfo(prev, dtype.Float32, "batch", cols)}
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, model(g.enc(), defaultOpset()), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// checkBigModel verifies the weights are all there and are views with the
// markers where written.
func checkBigModel(tb testing.TB, m *Model, n int, each int64) {
	var total int64
	for k := 0; k < n; k++ {
		c := m.Graph.Value(fmt.Sprintf("w%d", k)).Const
		total += int64(len(c.Data))
		if want := le32f(float32(k + 1)); !c.External || !bytes.Equal(c.Data[:4], want) {
			tb.Fatalf("w%d: external %v, marker %v, want %v", k, c.External, c.Data[:4], want)
		}
	}
	if total != int64(n)*each {
		tb.Fatalf("%d bytes of weights, want %d", total, int64(n)*each)
	}
}

// TestLoadExternalNoCopy loads 256 MiB of external weights and checks that
// the Go heap grows by a tiny fraction of that: the weights are mapped, not
// read or copied.
func TestLoadExternalNoCopy(t *testing.T) {
	const n, rows, cols = 4, 4096, 4096
	path := writeBigModel(t, t.TempDir(), n, rows, cols)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	runtime.ReadMemStats(&after)
	checkBigModel(t, m, n, rows*cols*4)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("Load allocated %d bytes for %d MiB of external weights", grew, n*rows*cols*4>>20)
	}
}

// BenchmarkLoadExternal1GB loads a model whose 16 float32 initializers of
// 64 MiB each live in one 1 GiB external file, and reports how much the Go
// heap and the RSS grow per Load. The file is sparse: the point is that Load
// maps it instead of reading or copying it.
func BenchmarkLoadExternal1GB(b *testing.B) {
	const n, rows, cols = 16, 4096, 4096
	const each = rows * cols * 4
	path := writeBigModel(b, b.TempDir(), n, rows, cols)
	var heapGrowth, rssGrowth float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rss0 := vmRSS(b)
		b.StartTimer()
		m, err := Load(path)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		rss1 := vmRSS(b)
		heapGrowth += float64(int64(after.HeapAlloc) - int64(before.HeapAlloc))
		rssGrowth += float64(rss1 - rss0)
		checkBigModel(b, m, n, each)
		m.Close()
		b.StartTimer()
	}
	b.ReportMetric(heapGrowth/float64(b.N)/1024, "heap-KiB/load")
	b.ReportMetric(rssGrowth/float64(b.N)/1024, "rss-KiB/load")
	b.ReportMetric(float64(n*each)/(1<<20), "weights-MiB")
}
