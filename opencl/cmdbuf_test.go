package opencl

import (
	"strings"
	"testing"
)

// cbSrc has two kernels whose results depend on the order they run in and
// on every argument, so that a command buffer that reordered launches, or
// ran one with another launch's arguments, gives different numbers.
const cbSrc = `
__kernel void scale_add(__global float *y, __global const float *x, float a, int n) {
	int i = get_global_id(0);
	if (i < n) y[i] = y[i] * a + x[i];
}
__kernel void rotate_left(__global float *y, __local float *t) {
	int i = get_local_id(0), n = get_local_size(0);
	t[i] = y[get_global_id(0)];
	barrier(CLK_LOCAL_MEM_FENCE);
	y[get_global_id(0)] = t[(i + 1) % n];
}
`

// cbFixture is a device with cbSrc built and four 64-float buffers.
type cbFixture struct {
	d           *Device
	mad, rot    *Kernel
	y, z, x1, w *Buffer
	hy, hz, hx1 []float32
}

const cbN = 64

func newCBFixture(t *testing.T, opts Options) *cbFixture {
	t.Helper()
	f := &cbFixture{d: open(t, opts)}
	p, err := f.d.Build(cbSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.mad, err = p.Kernel("scale_add"); err != nil {
		t.Fatal(err)
	}
	if f.rot, err = p.Kernel("rotate_left"); err != nil {
		t.Fatal(err)
	}
	f.hy, f.hz, f.hx1 = make([]float32, cbN), make([]float32, cbN), make([]float32, cbN)
	for i := range f.hy {
		f.hy[i] = float32(i%7) - 3
		f.hx1[i] = float32(i%5) * 0.25
	}
	for _, b := range []**Buffer{&f.y, &f.z, &f.x1, &f.w} {
		if *b, err = f.d.Alloc(4 * cbN); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []struct {
		b *Buffer
		h []float32
	}{{f.y, f.hy}, {f.z, f.hz}, {f.x1, f.hx1}, {f.w, f.hz}} {
		if err := f.d.Write(w.b, 0, f32bytes(w.h)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// step enqueues the sequence the tests record, with scale a: y = y*a + x1,
// y rotated left by one, z = z*0.5 + y (simulate does the same on the host).
func (f *cbFixture) step(t *testing.T, a float32) {
	t.Helper()
	g := []int{cbN}
	for _, l := range []struct {
		k    *Kernel
		args []any
	}{
		{f.mad, []any{f.y, f.x1, a, cbN}},
		{f.rot, []any{f.y, Local(4 * cbN)}},
		{f.mad, []any{f.z, f.y, float32(0.5), cbN}},
	} {
		if err := f.d.Launch(l.k, g, g, l.args...); err != nil {
			t.Fatal(err)
		}
	}
}

// record records step(a) into r.
func (f *cbFixture) record(t *testing.T, r *Recording, a float32) {
	t.Helper()
	f.d.StartRecording(r)
	f.step(t, a)
	f.d.StopRecording()
}

// simulate applies step(a) to the host copies.
func (f *cbFixture) simulate(a float32) {
	for i := range f.hy {
		f.hy[i] = f.hy[i]*a + f.hx1[i]
	}
	f.hy = append(f.hy[1:], f.hy[0])
	for i := range f.hz {
		f.hz[i] = f.hz[i]*0.5 + f.hy[i]
	}
}

// check compares the device's y and z with the host copies, exactly: the
// operations are single roundings on both sides.
func (f *cbFixture) check(t *testing.T, when string) {
	t.Helper()
	if err := f.d.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		b    *Buffer
		h    []float32
	}{{"y", f.y, f.hy}, {"z", f.z, f.hz}} {
		raw := make([]byte, 4*cbN)
		if err := f.d.Read(c.b, 0, raw); err != nil {
			t.Fatal(err)
		}
		got := bytesF32(raw)
		for i := range got {
			if got[i] != c.h[i] {
				t.Fatalf("%s: %s[%d] = %v, want %v", when, c.name, i, got[i], c.h[i])
			}
		}
	}
}

// clobber launches scale_add with other arguments, so that the kernel object's
// current arguments are not the recorded ones.
func (f *cbFixture) clobber(t *testing.T) {
	t.Helper()
	if err := f.d.Launch(f.mad, []int{cbN}, nil, f.w, f.x1, float32(7), cbN); err != nil {
		t.Fatal(err)
	}
}

func TestBakedReplay(t *testing.T) {
	f := newCBFixture(t, Options{})
	if !f.d.HasCommandBuffers() {
		t.Skipf("%s offers no cl_khr_command_buffer", f.d)
	}
	var r Recording
	f.record(t, &r, 2)
	f.simulate(2)
	f.check(t, "recording run")
	if err := f.d.Bake(&r); err != nil {
		t.Fatal(err)
	}
	if !r.Baked() {
		t.Fatal("Bake succeeded but the recording is not baked")
	}
	before := f.d.Stats()
	for i := 0; i < 3; i++ {
		f.clobber(t)
		if err := f.d.Replay(&r); err != nil {
			t.Fatal(err)
		}
		f.simulate(2)
	}
	f.check(t, "baked replays")
	after := f.d.Stats()
	if n := after.BakedReplays - before.BakedReplays; n != 3 {
		t.Fatalf("%d replays ran as command buffers, want 3 (fallbacks %d)", n, after.BakeFallbacks-before.BakeFallbacks)
	}
	if n := after.Launches - before.Launches; n != 3*int64(r.Len())+3 {
		t.Fatalf("Launches grew by %d, want %d", n, 3*r.Len()+3)
	}

	// Recording again (a new scale: a value the old buffer baked in) must
	// drop the buffer, never replay it.
	f.d.StartRecording(&r)
	if r.Baked() {
		t.Fatal("StartRecording kept the old command buffer")
	}
	f.step(t, -1.5)
	f.d.StopRecording()
	f.simulate(-1.5)
	if err := f.d.Replay(&r); err != nil {
		t.Fatal(err)
	}
	f.simulate(-1.5)
	f.check(t, "re-recorded, unbaked")
	if err := f.d.Bake(&r); err != nil {
		t.Fatal(err)
	}
	f.clobber(t)
	if err := f.d.Replay(&r); err != nil {
		t.Fatal(err)
	}
	f.simulate(-1.5)
	f.check(t, "re-baked")

	// Released: replays launch by launch, same results.
	r.Release()
	if r.Baked() {
		t.Fatal("Release left the recording baked")
	}
	if err := f.d.Replay(&r); err != nil {
		t.Fatal(err)
	}
	f.simulate(-1.5)
	f.check(t, "released")
}

func TestBakeRefusals(t *testing.T) {
	t.Run("env off", func(t *testing.T) {
		t.Setenv(CommandBuffersEnv, "off")
		d := open(t, Options{})
		if d.HasCommandBuffers() {
			t.Fatalf("%s=off but the device uses command buffers", CommandBuffersEnv)
		}
		if err := d.Bake(&Recording{}); err == nil {
			t.Fatal("Bake without command buffers succeeded")
		}
	})
	t.Run("profiling", func(t *testing.T) {
		f := newCBFixture(t, Options{Profile: true})
		var r Recording
		f.record(t, &r, 2)
		err := f.d.Bake(&r)
		if err == nil || r.Baked() {
			t.Fatalf("Bake on a profiling device: err %v, baked %v; want an error", err, r.Baked())
		}
		// Refused for profiling, not for lacking command buffers.
		if f.d.HasCommandBuffers() && !strings.Contains(err.Error(), "profiling") {
			t.Fatalf("Bake on a profiling device: %v; want the profiling refusal", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		d := open(t, Options{})
		err := d.Bake(&Recording{})
		if err == nil {
			t.Fatal("Bake of an empty recording succeeded")
		}
		if d.HasCommandBuffers() && !strings.Contains(err.Error(), "empty") {
			t.Fatalf("Bake of an empty recording: %v; want the empty-recording refusal", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		f := newCBFixture(t, Options{})
		if !f.d.HasCommandBuffers() {
			t.Skipf("%s offers no cl_khr_command_buffer", f.d)
		}
		var r Recording
		f.record(t, &r, 2)
		if err := f.d.Bake(&r); err != nil {
			t.Fatal(err)
		}
		// Close releases the baked buffer; the recording then says so.
		if err := f.d.Close(); err != nil {
			t.Fatal(err)
		}
		if r.Baked() {
			t.Fatal("Close left the recording baked")
		}
		if b, k := f.d.BakedObjects(); b != 0 || k != 0 {
			t.Fatalf("after Close: %d command buffers and %d kernel copies live, want none", b, k)
		}
		if err := f.d.Replay(&r); err == nil {
			t.Fatal("Replay on a closed device succeeded")
		}
	})
}

// TestAppendedRecording: recordings joined with Append replay, launch by
// launch and baked, as the steps they were recorded from, in order.
func TestAppendedRecording(t *testing.T) {
	f := newCBFixture(t, Options{})
	var a, b, joined Recording
	f.record(t, &a, 2)
	f.simulate(2)
	f.record(t, &b, -0.5)
	f.simulate(-0.5)
	joined.Append(&a)
	joined.Append(&b)
	if joined.Len() != a.Len()+b.Len() {
		t.Fatalf("joined %d launches, want %d", joined.Len(), a.Len()+b.Len())
	}
	if err := f.d.Replay(&joined); err != nil {
		t.Fatal(err)
	}
	f.simulate(2)
	f.simulate(-0.5)
	f.check(t, "joined, launch by launch")
	if !f.d.HasCommandBuffers() {
		t.Skipf("%s offers no cl_khr_command_buffer", f.d)
	}
	if err := f.d.Bake(&joined); err != nil {
		t.Fatal(err)
	}
	f.clobber(t)
	if err := f.d.Replay(&joined); err != nil {
		t.Fatal(err)
	}
	f.simulate(2)
	f.simulate(-0.5)
	f.check(t, "joined, baked")
	// Appending to a baked recording drops its buffer, which lacks the
	// new launches.
	joined.Append(&a)
	if joined.Baked() {
		t.Fatal("Append kept a command buffer that misses the appended launches")
	}
	joined.Reset()
	if joined.Len() != 0 || joined.Baked() {
		t.Fatalf("Reset left %d launches, baked %v", joined.Len(), joined.Baked())
	}
}

// TestBakedObjectsReleased: every command buffer and kernel copy Bake
// makes is released when its recording is baked again, recorded again,
// appended to, reset or released, and when a later Bake of it fails.
// (TestBakeRefusals/closed checks Close.)
func TestBakedObjectsReleased(t *testing.T) {
	f := newCBFixture(t, Options{})
	if !f.d.HasCommandBuffers() {
		t.Skipf("%s offers no cl_khr_command_buffer", f.d)
	}
	live := func(when string, buffers, kernels int) {
		t.Helper()
		if b, k := f.d.BakedObjects(); b != buffers || k != kernels {
			t.Fatalf("%s: %d command buffers and %d kernel copies live, want %d and %d", when, b, k, buffers, kernels)
		}
	}
	bake := func(r *Recording) {
		t.Helper()
		if err := f.d.Bake(r); err != nil {
			t.Fatal(err)
		}
	}
	var a, b Recording
	f.record(t, &a, 2)
	f.record(t, &b, 3)
	n := a.Len()
	live("nothing baked", 0, 0)
	bake(&a)
	live("a baked", 1, n)
	bake(&a)
	live("a baked twice", 1, n)
	bake(&b)
	live("a and b baked", 2, 2*n)
	f.record(t, &a, 2)
	live("a recorded again", 1, n)
	b.Append(&a)
	live("b appended to", 0, 0)
	bake(&b)
	live("b baked with a appended", 1, 2*n)
	b.Reset()
	live("b reset", 0, 0)
	bake(&a)
	a.Release()
	live("a released", 0, 0)

	// A Bake that fails holds nothing, not even what an earlier Bake of
	// the recording made.
	bake(&a)
	f.mad.p.Release()
	if err := f.d.Bake(&a); err == nil {
		t.Fatal("Bake of a recording whose kernels are released succeeded")
	}
	if a.Baked() {
		t.Fatal("a failed Bake left the recording baked")
	}
	live("a failed Bake", 0, 0)
}

// TestReplayReleasedKernel: a recording one of whose kernels was released
// since is refused by Replay, baked or not, before any of its launches is
// enqueued (the released kernel is the last launch's, so a check made
// launch by launch would have enqueued the others first).
func TestReplayReleasedKernel(t *testing.T) {
	for _, bake := range []bool{false, true} {
		f := newCBFixture(t, Options{})
		if bake && !f.d.HasCommandBuffers() {
			t.Skipf("%s offers no cl_khr_command_buffer", f.d)
		}
		p, err := f.d.Build(cbSrc, "")
		if err != nil {
			t.Fatal(err)
		}
		mad, err := p.Kernel("scale_add")
		if err != nil {
			t.Fatal(err)
		}
		var r Recording
		f.d.StartRecording(&r)
		f.step(t, 2)
		if err := f.d.Launch(mad, []int{cbN}, nil, f.w, f.x1, float32(3), cbN); err != nil {
			t.Fatal(err)
		}
		f.d.StopRecording()
		if bake {
			if err := f.d.Bake(&r); err != nil {
				t.Fatal(err)
			}
		}
		p.Release()
		before := f.d.Stats().Launches
		if err := f.d.Replay(&r); err == nil {
			t.Fatalf("baked %v: Replay with a released kernel succeeded", bake)
		}
		if n := f.d.Stats().Launches - before; n != 0 {
			t.Fatalf("baked %v: a refused Replay enqueued %d launches", bake, n)
		}
	}
}
