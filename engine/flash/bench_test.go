package flash

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadSize reproduces machine-facts' read-size curve: sequential
// O_DIRECT reads of 4 KB..1 MB through the pool at queue depth 1, 4 and 8,
// over a 64 MB file written just before (so it is in the page cache, which
// O_DIRECT must bypass). Besides MB/s it reports the median request latency
// and read_bytes growth per planned byte (1.00 means every byte came from
// the device). Run:
//
//	go test ./engine/flash -run '^$' -bench ReadSize -benchtime 2000x
func BenchmarkReadSize(b *testing.B) {
	dir := diskDir(b)
	const fileSize = 64 << 20
	p := filepath.Join(dir, "bench")
	w, err := Create(p, Options{})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := 0; i < fileSize; i += len(chunk) {
		for j := range chunk {
			chunk[j] = byte(i + j*31)
		}
		w.Write(chunk)
	}
	if err := w.Commit(); err != nil {
		b.Fatal(err)
	}
	defer os.Remove(p)
	for _, qd := range []int{1, 4, 8} {
		for _, size := range []int{4 << 10, 8 << 10, 16 << 10, 24 << 10, 64 << 10, 256 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("qd%d/%dKB", qd, size>>10), func(b *testing.B) {
				benchRead(b, p, qd, size, fileSize)
			})
		}
	}
}

func benchRead(b *testing.B, path string, qd, size, fileSize int) {
	st := NewStats()
	f, err := Open(path, Options{Stats: st})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	pool, err := NewPool(qd)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	// A batch keeps qd requests in flight; each request has its own buffer.
	batch := 16 * qd
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = AlignedBuf(size)
	}
	reqs := make([]Request, batch)
	b.SetBytes(int64(size))
	before, _ := ReadProcIO()
	b.ResetTimer()
	var off int64
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		for i := range n {
			if off+int64(size) > int64(fileSize) {
				off = 0
			}
			reqs[i] = Request{File: f, Off: off, Dst: bufs[i]}
			off += int64(size)
		}
		if err := pool.Read(reqs[:n]); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.StopTimer()
	after, _ := ReadProcIO()
	s := st.Snapshot()
	b.ReportMetric(float64(s.Read.Latency.P50.Microseconds()), "p50-µs")
	if s.Read.DeviceBytes > 0 {
		b.ReportMetric(float64(after.ReadBytes-before.ReadBytes)/float64(s.Read.DeviceBytes), "procio/planned")
	}
}

// BenchmarkWrite measures sequential O_DIRECT writes in place (64 KB and
// 1 MB) and whole-file replacement through Writer (16 MB per commit,
// including fsync and rename).
func BenchmarkWrite(b *testing.B) {
	dir := diskDir(b)
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("inplace/%dKB", size>>10), func(b *testing.B) {
			f, err := OpenRW(filepath.Join(dir, "w"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := AlignedBuf(size)
			b.SetBytes(int64(size))
			const span = 64 << 20
			for i := range b.N {
				if err := f.WriteAt(buf, int64(i*size)%span); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.Run("replace/16MB", func(b *testing.B) {
		data := make([]byte, 16<<20)
		b.SetBytes(int64(len(data)))
		for range b.N {
			w, err := Create(filepath.Join(dir, "r"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			w.Write(data)
			if err := w.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
