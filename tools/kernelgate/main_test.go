package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKernelSignatures(t *testing.T) {
	ll := `define dso_local spir_kernel void @k(i32 noundef %0, float addrspace(1)* noundef align 4 %1, <3 x float> noundef %2, <2 x half> %3) #0 !kernel_arg_addr_space !1 {
entry:
  ret void
}
define spir_func void @helper(i32 %0) {
  ret void
}
define spir_kernel void @empty() {
  ret void
}
`
	sigs := kernelSignatures(ll)
	if len(sigs) != 2 {
		t.Fatalf("found %d kernels, want 2 (helper is no kernel): %v", len(sigs), sigs)
	}
	k := sigs["k"]
	if len(k) != 4 {
		t.Fatalf("k has %d parameters, want 4: %q", len(k), k)
	}
	bytes := 0
	for _, p := range k {
		bytes += typeBytes(p)
	}
	if want := 4 + 8 + 16 + 4; bytes != want {
		t.Errorf("k's parameters take %d bytes, want %d", bytes, want)
	}
	if len(sigs["empty"]) != 0 {
		t.Errorf("empty has parameters %q", sigs["empty"])
	}
}

func TestKernelMeta(t *testing.T) {
	asm := `	.text
amdhsa.kernels:
  - .args:
      - .name:           x
        .size:           8
    .name:           first
    .private_segment_fixed_size: 16
    .sgpr_count:     20
    .sgpr_spill_count: 0
    .vgpr_count:     70
    .vgpr_spill_count: 3
  - .args:           []
    .name:           second
    .vgpr_count:     12
amdhsa.version:
  - 1
`
	m := kernelMeta(asm)
	if len(m) != 2 {
		t.Fatalf("%d kernels, want 2: %v", len(m), m)
	}
	if m["first"][".vgpr_count"] != "70" || m["first"][".vgpr_spill_count"] != "3" || m["first"][".private_segment_fixed_size"] != "16" {
		t.Errorf("first: %v", m["first"])
	}
	if m["second"][".vgpr_count"] != "12" {
		t.Errorf("second: %v", m["second"])
	}
	if _, ok := m["x"]; ok {
		t.Error("an argument's .name was taken for a kernel")
	}
}

func TestAllowlist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow")
	os.WriteFile(path, []byte("# comment\nregs gpu quant qmm_4x2 .* | spills\nparams never .* | stale\n"), 0o644)
	a, err := readAllow(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := a.match("regs gpu quant qmm_4x2 [-DQG=32]"); !ok || r != "spills" {
		t.Errorf("match = %q, %v", r, ok)
	}
	if _, ok := a.match("regs gpu quant qmv_wg [-DQG=32]"); ok {
		t.Error("qmv_wg matched an entry for qmm_4x2")
	}
	if s := a.unused(); len(s) != 1 || s[0] != "params never .*" {
		t.Errorf("unused = %q, want the params entry", s)
	}
	os.WriteFile(path, []byte("no separator here\n"), 0o644)
	if _, err := readAllow(path); err == nil {
		t.Error("a line without \" | reason\" was accepted")
	}
}

// TestExtFlag: subgroups and images are enabled only for programs built
// with their options (as whole words), fp16 only when asked.
func TestExtFlag(t *testing.T) {
	for _, tc := range []struct {
		fp16    bool
		options string
		want    string
	}{
		{false, "-DQG=128 -DQ_E0M4", "-cl-ext=-all"},
		{true, "-DQG=128", "-cl-ext=-all,+cl_khr_fp16"},
		{true, "-DQG=128 -DQ_SG", "-cl-ext=-all,+cl_khr_fp16,+cl_khr_subgroups,+__opencl_c_subgroups"},
		{false, "-DQ_SGX", "-cl-ext=-all"},
		{false, "-DMM_GPU -DMM_SG", "-cl-ext=-all,+cl_khr_subgroups,+__opencl_c_subgroups"},
		{true, "-DQG=32 -DQ_SG -DQ_IMG", "-cl-ext=-all,+cl_khr_fp16,+cl_khr_subgroups,+__opencl_c_subgroups,+__opencl_c_images"},
		{false, "-DQ_IMGX", "-cl-ext=-all"},
		{false, "-DMM_GPU -DMM_IMG", "-cl-ext=-all,+__opencl_c_images"},
	} {
		if got := extFlag(tc.fp16, tc.options); got != tc.want {
			t.Errorf("extFlag(%v, %q) = %q, want %q", tc.fp16, tc.options, got, tc.want)
		}
	}
}

// TestImageStub compiles an image-reading kernel through the register
// check, where libclc alone leaves each read an unknown call with 16 KiB
// of scratch: with the stub the kernel fits in a few registers and uses
// no scratch, and the SPIR-V compile at OpenCL C 3.0 passes with images
// enabled. Skipped where the compilers are not installed.
func TestImageStub(t *testing.T) {
	if err := checkTools(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "img.cl")
	os.WriteFile(src, []byte(`__kernel void rd(__read_only image1d_buffer_t im, __global uint *out, int off) {
	const int i = get_global_id(0);
	vstore4(read_imageui(im, off + i) + as_uint4(read_imagef(im, i)), i, out);
}
`), 0o644)
	stub, err := writeImageStub(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &program{family: "test", options: "-DQ_IMG"}
	rs := regCheck(dir, stub, 0, p, src, false, map[string]bool{"rd": true})
	if len(rs) != 1 || !rs[0].OK || rs[0].Scratch != 0 || rs[0].VGPRs == 0 || rs[0].VGPRs > 16 {
		t.Fatalf("register check of an image read: %+v", rs[0])
	}
	for _, r := range compileCheck(dir, 0, p, src, "CL3.0", false) {
		if !r.OK {
			t.Errorf("%s: %s", r.Key, r.Detail)
		}
	}
}
