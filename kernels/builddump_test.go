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
