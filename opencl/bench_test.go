package opencl

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// benchSrc is a kernel family of realistic size (a few hundred lines of
// OpenCL C once unrolled by the preprocessor is typical; this is smaller but
// exercises the same compiler path).
const benchSrc = `
#define ROWS 4
__kernel void gemv(__global const float *w, __global const float *x, __global float *y, int n, int k) {
	int r = get_global_id(0);
	if (r >= n) return;
	float acc = 0.0f;
	for (int i = 0; i < k; i += 4) {
		float4 a = vload4(0, w + (size_t)r * k + i);
		float4 b = vload4(0, x + i);
		acc = fma(a.x, b.x, fma(a.y, b.y, fma(a.z, b.z, fma(a.w, b.w, acc))));
	}
	y[r] = acc;
}
__kernel void softmax(__global float *x, int n) {
	float m = -INFINITY;
	for (int i = 0; i < n; i++) m = fmax(m, x[i]);
	float s = 0.0f;
	for (int i = 0; i < n; i++) { x[i] = exp(x[i] - m); s += x[i]; }
	for (int i = 0; i < n; i++) x[i] /= s;
}
__kernel void add(__global float *y, __global const float *x, int n) {
	int i = get_global_id(0);
	if (i < n) y[i] += x[i];
}
`

// BenchmarkBuild compares compiling from source (made unique per iteration,
// so that no driver-side cache can serve it) with loading the same program
// from tlite's binary cache in a freshly opened device.
func BenchmarkBuild(b *testing.B) {
	b.Run("cold", func(b *testing.B) {
		d := open(b, Options{CacheDir: "-"})
		nonce := time.Now().UnixNano()
		for i := 0; i < b.N; i++ {
			// A comment would not do: drivers may hash preprocessed source.
			src := fmt.Sprintf("__kernel void nonce_%d_%d(__global int *p) { p[0] = %d; }\n%s", nonce, i, i, benchSrc)
			p, err := d.Build(src, "")
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	})
	b.Run("cached", func(b *testing.B) {
		dir := b.TempDir()
		src := fmt.Sprintf("__kernel void nonce_%d(__global int *p) { p[0] = 1; }\n%s", time.Now().UnixNano(), benchSrc)
		warm := open(b, Options{CacheDir: dir})
		if _, err := warm.Build(src, ""); err != nil {
			b.Fatal(err)
		}
		d := open(b, Options{CacheDir: dir})
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p, err := d.Build(src, "")
			if err != nil {
				b.Fatal(err)
			}
			if !p.FromCache() {
				b.Fatal("cache miss")
			}
			p.Release()
		}
	})
}

// BenchmarkLaunch measures the host cost of one small kernel launch, batched
// (one Finish per 256 launches, as a decode step does) and synchronous
// (Finish after every launch).
func BenchmarkLaunch(b *testing.B) {
	for _, mode := range []string{"batched", "finish-each", "batched-profiled"} {
		b.Run(mode, func(b *testing.B) {
			d := open(b, Options{Profile: mode == "batched-profiled"})
			p, err := d.Build(benchSrc, "")
			if err != nil {
				b.Fatal(err)
			}
			k, _ := p.Kernel("add")
			x, _ := d.Alloc(4 * 64)
			y, _ := d.Alloc(4 * 64)
			d.Fill(x, 0, 4*64, []byte{0, 0, 0x80, 0x3f})
			d.Fill(y, 0, 4*64, []byte{0, 0, 0, 0})
			// The first launch at a local size may compile (PoCL specialises
			// per work-group size); keep it out of the timing.
			if err := d.Launch(k, []int{64}, []int{64}, y, x, 64); err != nil {
				b.Fatal(err)
			}
			d.Finish()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := d.Launch(k, []int{64}, []int{64}, y, x, 64); err != nil {
					b.Fatal(err)
				}
				if mode == "finish-each" || i%256 == 255 {
					d.Finish()
					if mode == "batched-profiled" {
						d.Profile()
					}
				}
			}
			d.Finish()
		})
	}
}

// BenchmarkStep measures the host cost of a decode-like step of 170 tiny
// launches (the default model's count) of 1 or 16 work-groups and one
// Finish, enqueued three ways: one Launch at a time, replayed from a Recording, and replayed
// through a command buffer (Bake). The kernels do almost nothing, so the
// time per step is launch overhead; ns/launch is that over 170. The
// difference between "launch" and "replay" is tlite's argument packing,
// between "replay" and "baked" the driver's per-launch entry cost.
// enqueue-ns/launch is the part spent enqueueing, before Finish;
// cpu-ns/launch the process's CPU time (the driver's threads included),
// which a loaded machine disturbs less than the wall time.
//
// On PoCL 3.1 here (2 cores, load about 5, 5 alternated rounds) all three
// cost about 2.3 µs of CPU per launch at 1 work-group (medians 2295, 2293,
// 2301 ns) and 2.9-3.6 µs at 16, baked the most (2908, 3011, 3618 ns):
// PoCL enqueues a command buffer's commands one by one, so the buffer
// removes none of the per-launch work, and tlite's argument packing,
// which replay skips, is too small to show.
func BenchmarkStep(b *testing.B) {
	const launches = 170
	for _, c := range []struct {
		mode   string
		groups int
	}{{"launch", 1}, {"replay", 1}, {"baked", 1}, {"launch", 16}, {"replay", 16}, {"baked", 16}} {
		mode, n := c.mode, 64*c.groups
		b.Run(fmt.Sprintf("%s/groups=%d", mode, c.groups), func(b *testing.B) {
			d := open(b, Options{})
			if mode == "baked" && !d.HasCommandBuffers() {
				b.Skipf("%s offers no cl_khr_command_buffer", d)
			}
			p, err := d.Build(benchSrc, "")
			if err != nil {
				b.Fatal(err)
			}
			k, _ := p.Kernel("add")
			x, _ := d.Alloc(4 * n)
			y, _ := d.Alloc(4 * n)
			d.Fill(x, 0, 4*n, []byte{0, 0, 0x80, 0x3f})
			d.Fill(y, 0, 4*n, []byte{0, 0, 0, 0})
			step := func() error {
				for i := 0; i < launches; i++ {
					// Alternate the arguments, as a real step's launches differ.
					dst, src := y, x
					if i%2 == 1 {
						dst, src = x, y
					}
					if err := d.Launch(k, []int{n}, []int{64}, dst, src, n); err != nil {
						return err
					}
				}
				return nil
			}
			var r Recording
			d.StartRecording(&r)
			err = step()
			d.StopRecording()
			if err != nil {
				b.Fatal(err)
			}
			if mode == "baked" {
				if err := d.Bake(&r); err != nil {
					b.Fatal(err)
				}
			}
			d.Finish()
			var enq time.Duration
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if mode == "launch" {
					err = step()
				} else {
					err = d.Replay(&r)
				}
				enq += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Finish(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*launches), "cpu-ns/launch")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*launches), "ns/launch")
			// The enqueueing alone: what the host spends before Finish
			// (the device starts on the first launches meanwhile).
			b.ReportMetric(float64(enq.Nanoseconds())/float64(b.N*launches), "enqueue-ns/launch")
			if mode == "baked" && d.Stats().BakedReplays < int64(b.N) {
				b.Fatalf("%d of %d steps ran as a command buffer", d.Stats().BakedReplays, b.N)
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
