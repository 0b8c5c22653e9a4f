package kernels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildDump records builds the way TLITE_KERNEL_DUMP does and checks
// the lines and sources the gate reads.
func TestBuildDump(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envDump, dir)
	t.Setenv(envProfile, "gpu-fp16")
	l := New(testLib.Device())
	if got := l.info(); got.Type != "GPU" || !got.FP16 {
		t.Fatalf("profile gpu-fp16 gives type %s fp16 %v", got.Type, got.FP16)
	}
	if _, err := l.kernel("pool", poolSrc, F32.define(), "pool_max"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.kernel("pool", poolSrc, F32.define(), "pool_max"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "builds.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d lines for one kernel built twice, want 1: %q", len(lines), lines)
	}
	f := strings.Split(lines[0], "\t")
	if len(f) != 6 || f[0] != "gpu-fp16" || f[1] != "selected" || f[2] != "pool" || f[4] != "pool_max" {
		t.Fatalf("line %q", lines[0])
	}
	src, err := os.ReadFile(filepath.Join(dir, "src", f[3]+".cl"))
	if err != nil {
		t.Fatal(err)
	}
	if string(src) != commonSrc+"\n"+poolSrc {
		t.Error("dumped source is not the text handed to the compiler")
	}

	t.Setenv(envProfile, "phone")
	bad := New(testLib.Device())
	if _, err := bad.kernel("pool", poolSrc, "", "pool_max"); err == nil || !strings.Contains(err.Error(), envProfile) {
		t.Errorf("unknown profile: error %v, want one naming %s", err, envProfile)
	}
}

// TestHalfEmuEnv checks TLITE_KERNEL_HALF_EMU: the GPU attention kernels'
// half path is built in its emulation where it is selected (AttnAuto on a
// gpu-fp16 profile, AttnFP16), not where it is not (AttnFP32, AttnAuto on
// the gpu profile, which has no cl_khr_fp16 and refuses AttnFP16), such
// builds are marked forced for the gate, and a bad value is an error.
func TestHalfEmuEnv(t *testing.T) {
	const emu = " -DATT_HALF -DHALF_EMU"
	t.Setenv(envHalfEmu, "1")
	for _, tc := range []struct {
		profile string
		want    map[AttnPrecision]string // absent: an error
	}{
		{"gpu-fp16", map[AttnPrecision]string{AttnAuto: emu, AttnFP32: "", AttnFP16: emu}},
		{"gpu", map[AttnPrecision]string{AttnAuto: "", AttnFP32: ""}},
	} {
		t.Setenv(envProfile, tc.profile)
		l := New(testLib.Device())
		for _, pc := range []AttnPrecision{AttnAuto, AttnFP32, AttnFP16} {
			got, err := l.attnHalfOptions(F16, pc)
			want, ok := tc.want[pc]
			switch {
			case !ok && err == nil:
				t.Errorf("%s at %v: options %q, want an error", tc.profile, pc, got)
			case ok && (err != nil || got != want):
				t.Errorf("%s at %v: options %q (error %v), want %q", tc.profile, pc, got, err, want)
			}
		}
		if !l.forced("attention", "attn_wg") {
			t.Errorf("%s: an emulated attention build is not marked forced", tc.profile)
		}
	}
	t.Setenv(envHalfEmu, "yes")
	bad := New(testLib.Device())
	if _, err := bad.kernel("pool", poolSrc, "", "pool_max"); err == nil || !strings.Contains(err.Error(), envHalfEmu) {
		t.Errorf("TLITE_KERNEL_HALF_EMU=yes: error %v, want one naming %s", err, envHalfEmu)
	}
}
