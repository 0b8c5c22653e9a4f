package flash

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// diskDir returns a temporary directory on a disk-backed file system; the
// package refuses memory file systems, so on one the test cannot run.
func diskDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	if fs, err := memoryFS(d); err != nil || fs != "" {
		t.Skipf("temporary directory %s is on %q (err %v): direct I/O tests need a disk", d, fs, err)
	}
	if !directSupported() {
		t.Skip("O_DIRECT is Linux-only")
	}
	return d
}

// randFile writes n pseudo-random bytes (buffered, so they sit in the page
// cache) and returns the path and the content.
func randFile(t testing.TB, dir string, n int, seed int64) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(data)
	p := filepath.Join(dir, fmt.Sprintf("data-%d", seed))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func TestAlignedBuf(t *testing.T) {
	for _, n := range []int{1, 511, 512, 4095, 4096, 4097, 1 << 20, 3<<20 + 7} {
		b := AlignedBuf(n)
		if len(b) != n || cap(b) != n {
			t.Errorf("AlignedBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		if a := uintptr(unsafe.Pointer(&b[0])) % PageSize; a != 0 {
			t.Errorf("AlignedBuf(%d): address %% %d = %d", n, PageSize, a)
		}
	}
	if AlignedBuf(0) != nil {
		t.Error("AlignedBuf(0) should be nil")
	}
	b := AlignedBuf(4096)
	if !IsAligned(b) || IsAligned(b[1:513]) || IsAligned(b[:100]) {
		t.Error("IsAligned misjudges")
	}
}

func TestReadAt(t *testing.T) {
	dir := diskDir(t)
	const size = 3<<20 + 1000 // not a multiple of the block size
	p, data := randFile(t, dir, size, 1)
	f, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cases := []struct {
		name     string
		off, n   int64
		aligned  bool
		wantFail string
	}{
		{"aligned block", 0, 4096, true, ""},
		{"aligned 1MB", 1 << 20, 1 << 20, true, ""},
		{"unaligned small", 7, 100, false, ""},
		{"unaligned crossing blocks", 500, 1000, false, ""},
		{"unaligned larger than bounce buffer", 12345, 2<<20 + 17, false, ""},
		{"aligned buffer, unaligned offset", 100, 4096, true, ""},
		{"tail of short last block", size - 1000, 1000, false, ""},
		{"aligned tail block read exactly to EOF", size - 1000, 1000, true, ""},
		{"last byte", size - 1, 1, false, ""},
		{"past EOF", size - 10, 20, false, "file ends at 3146728"},
		{"aligned past EOF", 3 << 20, 4096, true, "file ends at 3146728"},
		{"entirely beyond EOF", 10 << 20, 512, true, "file ends at"},
		{"negative offset", -512, 512, true, "negative offset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dst []byte
			if c.aligned {
				dst = AlignedBuf(int(c.n))
			} else {
				dst = make([]byte, c.n+1)[1:] // deliberately misaligned
			}
			err := f.ReadAt(dst, c.off)
			if c.wantFail != "" {
				if err == nil {
					t.Fatalf("read past the end succeeded")
				}
				msg := err.Error()
				for _, want := range []string{p, fmt.Sprintf("offset %d", c.off), fmt.Sprintf("length %d", c.n), c.wantFail} {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q lacks %q", msg, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, data[c.off:c.off+c.n]) {
				t.Fatal("wrong bytes")
			}
		})
	}
}

func TestWriteAt(t *testing.T) {
	dir := diskDir(t)
	p := filepath.Join(dir, "pool")
	f, err := OpenRW(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := AlignedBuf(8192)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		src  []byte
		off  int64
	}{
		{"unaligned offset", buf[:4096], 100},
		{"unaligned length", buf[:1000], 0},
		{"unaligned address", buf[1:513], 0},
	} {
		err := f.WriteAt(c.src, c.off)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d length %d", c.off, len(c.src))) {
			t.Errorf("%s: got %v, want an alignment error naming file, offset and length", c.name, err)
		}
	}
	if err := f.WriteAt(buf, 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := AlignedBuf(8192)
	if err := f.ReadAt(got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("read back differs")
	}
	if sz, _ := f.Size(); sz != 12288 {
		t.Fatalf("size %d, want 12288", sz)
	}
	s := f.Stats().Snapshot()
	if s.Write.Ops != 1 || s.Write.Bytes != 8192 {
		t.Fatalf("write stats %+v: refused writes must not count", s.Write)
	}
}

func TestWriterAtomic(t *testing.T) {
	dir := diskDir(t)
	p := filepath.Join(dir, "ctx.json")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Abort leaves the old file and no temporary behind.
	w, err := Create(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("after Abort the file holds %q", b)
	}
	// A commit of odd-sized pieces replaces it exactly.
	for _, size := range []int{0, 1, 511, 512, writerBuf, 3*writerBuf + 123} {
		want := make([]byte, size)
		rand.New(rand.NewSource(int64(size))).Read(want)
		w, err := Create(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for rest := want; len(rest) > 0; {
			k := min(len(rest), 1+rand.Intn(300000))
			if n, err := w.Write(rest[:k]); n != k || err != nil {
				t.Fatalf("Write: %d, %v", n, err)
			}
			rest = rest[k:]
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		w.Abort() // harmless after Commit
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: file holds %d bytes, content equal %v", size, len(got), bytes.Equal(got[:min(len(got), size)], want[:min(len(got), size)]))
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the target (temporaries left behind?)", len(ents))
	}
}

func TestMemoryFSRefused(t *testing.T) {
	const shm = "/dev/shm"
	if fs, err := memoryFS(shm); err != nil || fs != "tmpfs" {
		t.Skipf("%s is not tmpfs here (%q, %v)", shm, fs, err)
	}
	dir, err := os.MkdirTemp(shm, "flash-test-")
	if err != nil {
		t.Skipf("cannot use %s: %v", shm, err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "x")
	os.WriteFile(p, make([]byte, 8192), 0o644)
	_, err = Open(p, Options{})
	if !errors.Is(err, ErrNoDirect) || !strings.Contains(err.Error(), "tmpfs") || !strings.Contains(err.Error(), p) {
		t.Fatalf("Open on tmpfs: %v, want ErrNoDirect naming the file and tmpfs", err)
	}
	f, err := Open(p, Options{Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.ReadAt(make([]byte, 100), 3); err != nil {
		t.Fatal(err)
	}
	if l := f.Stats().Snapshot().Label; !strings.Contains(l, "measures RAM") || !strings.Contains(l, "buffered") {
		t.Fatalf("label %q does not say buffered and RAM", l)
	}
}

func TestBufferedOptIn(t *testing.T) {
	dir := diskDir(t)
	p, data := randFile(t, dir, 100000, 2)
	f, err := Open(p, Options{Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, 777)
	if err := f.ReadAt(got, 333); err != nil || !bytes.Equal(got, data[333:333+777]) {
		t.Fatalf("buffered read: %v", err)
	}
	if err := f.ReadAt(got, 100000-10); err == nil {
		t.Fatal("buffered read past EOF succeeded")
	}
	if l := f.Stats().Snapshot().Label; !strings.Contains(l, "not O_DIRECT") || strings.Contains(l, "RAM") {
		t.Fatalf("label %q", l)
	}
}

func TestStatsRunsAndSizes(t *testing.T) {
	dir := diskDir(t)
	p1, _ := randFile(t, dir, 1<<20, 3)
	p2, _ := randFile(t, dir, 1<<20, 4)
	st := NewStats()
	f1, err := Open(p1, Options{Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := Open(p2, Options{Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	type rd struct {
		f      *File
		off, n int64
	}
	// Runs: [0,4K)+[4K,8K)+[8K,16K) = 16K; [64K,68K); f2 [68K,72K) (other
	// file: new run); f2 [72K,72K+100) unaligned, contiguous.
	seq := []rd{{f1, 0, 4096}, {f1, 4096, 4096}, {f1, 8192, 8192}, {f1, 65536, 4096}, {f2, 69632, 4096}, {f2, 73728, 100}}
	for _, r := range seq {
		if err := r.f.ReadAt(make([]byte, r.n), r.off); err != nil {
			t.Fatal(err)
		}
	}
	s := st.Snapshot()
	r := s.Read
	if r.Ops != 6 || r.Bytes != 4096*4+8192+100 {
		t.Fatalf("ops %d bytes %d", r.Ops, r.Bytes)
	}
	if r.DeviceBytes != 4096*4+8192+512 {
		t.Fatalf("device bytes %d, want the unaligned read widened to one block", r.DeviceBytes)
	}
	if r.Runs != 3 || r.MaxRunBytes != 16384 {
		t.Fatalf("runs %d max %d, want 3 and 16384", r.Runs, r.MaxRunBytes)
	}
	if want := float64(r.Bytes) / 3; r.MeanRunBytes != want {
		t.Fatalf("mean run %v want %v", r.MeanRunBytes, want)
	}
	wantSizes := []SizeCount{{128, 1}, {4096, 4}, {8192, 1}}
	if fmt.Sprint(r.Sizes) != fmt.Sprint(wantSizes) {
		t.Fatalf("sizes %v want %v", r.Sizes, wantSizes)
	}
	wantRuns := []SizeCount{{4096, 1}, {8192, 1}, {16384, 1}}
	if fmt.Sprint(r.RunSizes) != fmt.Sprint(wantRuns) {
		t.Fatalf("run sizes %v want %v", r.RunSizes, wantRuns)
	}
	if r.Latency.Min <= 0 || r.Latency.Max < r.Latency.P50 || r.Busy <= 0 {
		t.Fatalf("latency %+v", r.Latency)
	}
	if s.Label != "O_DIRECT" {
		t.Fatalf("label %q", s.Label)
	}
	st.Reset()
	if s := st.Snapshot(); s.Read.Ops != 0 || s.Read.Runs != 0 || s.Label != "O_DIRECT" {
		t.Fatalf("after Reset: %+v", s)
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	if h.Mean() != 500500*time.Nanosecond {
		t.Fatalf("mean %v", h.Mean())
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 500 * time.Microsecond}, {95, 950 * time.Microsecond}, {99, 990 * time.Microsecond}, {100, 1000 * time.Microsecond}, {0.1, time.Microsecond}} {
		got := h.Percentile(c.p)
		if got < c.want || float64(got) > float64(c.want)*1.125 {
			t.Errorf("p%v = %v, want within [%v, +12.5%%]", c.p, got, c.want)
		}
	}
	var e Histogram
	if e.Percentile(50) != 0 || e.Mean() != 0 {
		t.Error("empty histogram")
	}
	// Every bucket's upper edge must exceed the values it holds.
	for _, d := range []time.Duration{1, 2, 3, 7, 8, 9, 1000, 123456789, time.Hour} {
		if i := histIndex(d); histUpper(i) <= d && i != histBuckets-1 {
			t.Errorf("%v lands in bucket %d with upper edge %v", d, i, histUpper(i))
		}
	}
}

// TestProcIOCrossCheck is the spec's catch for "page-cache flash": reading a
// file that sits in the page cache through this package must still grow the
// kernel's read_bytes by the bytes read, while a plain buffered read of the
// same cached file (the negative control) must not.
func TestProcIOCrossCheck(t *testing.T) {
	dir := diskDir(t)
	const size = 8 << 20
	p, data := randFile(t, dir, size, 5) // written buffered: cached
	buf := make([]byte, size)
	plain, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	before, err := ReadProcIO()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	mid, _ := ReadProcIO()
	if d := mid.ReadBytes - before.ReadBytes; d > size/4 {
		t.Fatalf("control: a cached buffered read grew read_bytes by %d; the check cannot discriminate here", d)
	}

	f, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pool, err := NewPool(4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dst := AlignedBuf(size)
	var reqs []Request
	for off := 0; off < size; off += 256 << 10 {
		reqs = append(reqs, Request{File: f, Off: int64(off), Dst: dst[off : off+256<<10]})
	}
	check, err := StartDeviceCheck(f.Stats())
	if err != nil {
		t.Fatal(err)
	}
	start, _ := ReadProcIO()
	if err := pool.Read(reqs); err != nil {
		t.Fatal(err)
	}
	end, _ := ReadProcIO()
	if p, k, err := check.Verify(); err != nil || p != size || k < p {
		t.Fatalf("DeviceCheck: planned %d kernel %d: %v", p, k, err)
	}
	planned := f.Stats().Snapshot().Read.DeviceBytes
	got := end.ReadBytes - start.ReadBytes
	t.Logf("cached buffered control: read_bytes +%d; O_DIRECT pool: planned %d, read_bytes +%d", mid.ReadBytes-before.ReadBytes, planned, got)
	if planned != size || got < planned || got > planned+size/8 {
		t.Fatalf("O_DIRECT read of %d planned bytes grew read_bytes by %d", planned, got)
	}
	if !bytes.Equal(dst, data) {
		t.Fatal("wrong bytes")
	}
}

// TestDeviceCheckCatchesCache: a buffered read of a cached file records
// planned device bytes the kernel never saw, and Verify must say so.
func TestDeviceCheckCatchesCache(t *testing.T) {
	dir := diskDir(t)
	p, _ := randFile(t, dir, 4<<20, 6)
	f, err := Open(p, Options{Buffered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	check, err := StartDeviceCheck(f.Stats())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ReadAt(make([]byte, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	planned, kernel, err := check.Verify()
	if err == nil || planned != 4<<20 {
		t.Fatalf("cached buffered read passed the device check: planned %d kernel %d", planned, kernel)
	}
}

func TestConcurrentReadAt(t *testing.T) {
	dir := diskDir(t)
	p, data := randFile(t, dir, 1<<20, 7)
	f, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				off := (g*50 + i) * 997 % (1<<20 - 5000)
				var dst []byte
				if i%2 == 0 {
					dst = make([]byte, 4000)
				} else {
					off &^= BlockSize - 1
					dst = AlignedBuf(4096)
				}
				if err := f.ReadAt(dst, int64(off)); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(dst, data[off:off+len(dst)]) {
					t.Errorf("goroutine %d read %d: wrong bytes", g, i)
				}
			}
		}()
	}
	wg.Wait()
	if n := f.Stats().Snapshot().Read.Ops; n != 200 {
		t.Fatalf("%d ops recorded, want 200", n)
	}
}

func TestPoolConcurrent(t *testing.T) {
	dir := diskDir(t)
	const size = 4<<20 + 300
	st := NewStats()
	var files []*File
	var datas [][]byte
	for i := range 3 {
		p, d := randFile(t, dir, size, int64(10+i))
		f, err := Open(p, Options{Stats: st})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files, datas = append(files, f), append(datas, d)
	}
	pool, err := NewPool(6)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 20 {
				reqs := make([]Request, 1+rng.Intn(12))
				var want [][]byte
				for i := range reqs {
					fi := rng.Intn(3)
					n := 1 + rng.Intn(300000)
					off := rng.Intn(size - n)
					if rng.Intn(2) == 0 {
						off &^= BlockSize - 1
						n = (n + BlockSize - 1) &^ (BlockSize - 1)
						if off+n > size {
							off -= BlockSize
						}
						reqs[i] = Request{File: files[fi], Off: int64(off), Dst: AlignedBuf(n)}
					} else {
						reqs[i] = Request{File: files[fi], Off: int64(off), Dst: make([]byte, n)}
					}
					want = append(want, datas[fi][off:off+n])
					mu.Lock()
					total += int64(n)
					mu.Unlock()
				}
				b := pool.Submit(reqs)
				if err := b.Wait(); err != nil {
					t.Error(err)
					return
				}
				for i := range reqs {
					if !bytes.Equal(reqs[i].Dst, want[i]) {
						t.Errorf("goroutine %d: request %d wrong bytes", g, i)
					}
				}
			}
		}()
	}
	wg.Wait()
	if s := st.Snapshot(); s.Read.Bytes != total || s.Read.Latency.Max < s.Read.Latency.Min {
		t.Fatalf("stats bytes %d, want %d", s.Read.Bytes, total)
	}
	// Errors are per request and name the file, offset and length.
	reqs := []Request{
		{File: files[0], Off: 0, Dst: make([]byte, 10)},
		{File: files[1], Off: size - 5, Dst: make([]byte, 10)},
		{File: nil, Off: 7, Dst: make([]byte, 3)},
		{File: files[2], Off: 0, Dst: nil},
	}
	err = pool.Read(reqs)
	if err == nil || reqs[0].Err != nil || reqs[1].Err == nil || reqs[2].Err == nil || reqs[3].Err != nil {
		t.Fatalf("errors: batch %v, per request %v %v %v %v", err, reqs[0].Err, reqs[1].Err, reqs[2].Err, reqs[3].Err)
	}
	if !strings.Contains(reqs[1].Err.Error(), files[1].Path()) || !strings.Contains(reqs[1].Err.Error(), fmt.Sprintf("offset %d length 10", size-5)) {
		t.Fatalf("error does not name the request: %v", reqs[1].Err)
	}
	if b := pool.Submit(nil); b.Wait() != nil {
		t.Fatal("empty batch")
	}
	pool.Close()
	late := []Request{{File: files[0], Off: 0, Dst: make([]byte, 10)}}
	if err := pool.Read(late); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := NewPool(0); err == nil {
		t.Fatal("depth 0 accepted")
	}
}

// TestPoolBoundedMemory: many large unaligned requests must not allocate
// more than the workers' bounce buffers, whatever the request sizes.
func TestPoolBoundedMemory(t *testing.T) {
	dir := diskDir(t)
	const size = 8 << 20
	p, data := randFile(t, dir, size, 20)
	f, err := Open(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const depth = 4
	pool, err := NewPool(depth)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dsts := make([][]byte, 8)
	for i := range dsts {
		dsts[i] = make([]byte, 3<<20+1)
	}
	reqs := make([]Request, len(dsts))
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	var read int64
	for round := range 4 {
		for i := range reqs {
			off := int64(round*1000 + i*511 + 1)
			reqs[i] = Request{File: f, Off: off, Dst: dsts[i]}
			read += int64(len(dsts[i]))
		}
		if err := pool.Read(reqs); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			if !bytes.Equal(reqs[i].Dst, data[reqs[i].Off:reqs[i].Off+int64(len(dsts[i]))]) {
				t.Fatal("wrong bytes")
			}
		}
	}
	runtime.ReadMemStats(&ms1)
	alloc := int64(ms1.TotalAlloc - ms0.TotalAlloc)
	limit := int64(depth*(DefaultScratch+PageSize)) + 1<<20
	if alloc > limit {
		t.Fatalf("reading %d bytes allocated %d, more than the bounce buffers (%d)", read, alloc, limit)
	}
}

func TestThrottle(t *testing.T) {
	dir := diskDir(t)
	p, _ := randFile(t, dir, 1<<20, 30)
	thr := NewThrottle(50e6, 1000) // 1 ms per op at least; 1 MB takes 20 ms
	f, err := Open(p, Options{Throttle: thr})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	buf := AlignedBuf(4096)
	for i := range 20 {
		if err := f.ReadAt(buf, int64(i*4096)); err != nil {
			t.Fatal(err)
		}
	}
	big := AlignedBuf(1 << 20)
	if err := f.ReadAt(big, 0); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 39*time.Millisecond {
		t.Fatalf("20 IOPS-bound ops + 1 MB at 50 MB/s took %v, want ≥ 40 ms", el)
	}
	s := f.Stats().Snapshot()
	if !strings.Contains(s.Label, "emulated") || s.Read.Latency.Max < 20*time.Millisecond {
		t.Fatalf("label %q, max latency %v", s.Label, s.Read.Latency.Max)
	}
}

func TestReadProcIO(t *testing.T) {
	p, err := ReadProcIO()
	if err != nil {
		t.Fatal(err)
	}
	if p.Rchar <= 0 {
		t.Fatalf("rchar %d: this process has read files, so it must be positive", p.Rchar)
	}
}
