package kernels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// TestQuantBuildSpace declares MatMulQ's whole build space, into the
// gate's dump when tools/kernelgate.sh runs the tests, and checks that the
// space holds what a real launch builds: the INT4 decode GEMV at groups of
// 32 in fp32 storage on the gpu profile (qmt_r1 on the tiled layout, a
// variant only the engine built before), which must also match the
// reference on PoCL.
func TestQuantBuildSpace(t *testing.T) {
	n, err := testLib.declareBuildSpace()
	if err != nil {
		t.Fatal(err)
	}
	// At least one program per format and group, each with a decode and a
	// prefill kernel.
	if least := 2 * len(quantGroups) * 2; n < least {
		t.Fatalf("build space declared %d (options, kernel) pairs, want at least %d", n, least)
	}

	launchDir, spaceDir := t.TempDir(), t.TempDir()
	t.Setenv(envProfile, "gpu")
	t.Setenv(envDump, launchDir)
	l := New(testLib.Device())
	if l.QuantLayout() != QLayoutTile4 {
		t.Fatalf("gpu profile: layout %v, want tile4", l.QuantLayout())
	}
	const K, N = 3 * 32, 6
	_, wp := qWeight(t, 5, quant.Int4, K, N, 32)
	wq := uploadQTile4(t, wp)
	a := laRand(21, K, F32)
	c := upload(t, F32, make([]float32, N))
	p := QMatMulParams{M: 1, N: N, K: K}
	if err := l.MatMulQ(F32, upload(t, F32, a), wq, c, p); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, N)
	if err := MatMulQRef(a, wp, nil, want, p); err != nil {
		t.Fatal(err)
	}
	laClose(t, "qmt_r1 INT4 group 32 fp32", F32, download(t, F32, c, N), want)

	t.Setenv(envDump, spaceDir)
	space := New(testLib.Device())
	if _, err := space.declareBuildSpace(); err != nil {
		t.Fatal(err)
	}
	launched, declared := dumpLines(t, launchDir), dumpLines(t, spaceDir)
	if len(launched) == 0 {
		t.Fatal("the launch recorded no build")
	}
	for line := range launched {
		if !declared[line] {
			t.Errorf("launch built %q, which the build space does not declare", line)
		}
	}
	// The declared sources are the text a build hands the compiler.
	hashes := map[string]bool{}
	for line := range declared {
		hashes[strings.Split(line, "\t")[3]] = true
	}
	for hash := range hashes {
		src, err := os.ReadFile(filepath.Join(spaceDir, "src", hash+".cl"))
		if err != nil {
			t.Fatal(err)
		}
		if string(src) != commonSrc+"\n"+quantProg() {
			t.Errorf("declared source %s is not the quant program", hash)
		}
	}
}

// dumpLines is the set of builds.tsv lines in a build dump.
func dumpLines(t *testing.T, dir string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "builds.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if strings.Count(l, "\t") != 5 {
			t.Fatalf("%s: malformed line %q", dir, l)
		}
		out[l] = true
	}
	return out
}
