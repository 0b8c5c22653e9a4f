package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// nodePassingFile is the node corpus's ratchet: the cases that were correct
// (on the device or host-only) when it was last updated.
var nodePassingFile = filepath.Join("testdata", "node_passing.txt")

// nodeCorpusDir returns the generated corpus, generating it with Debian's
// python3 (python3-onnx 1.12, installed by tools/setup.sh) when the cache
// does not hold it. It is written next to its final place and renamed, so
// an interrupted generation leaves no half corpus behind.
func nodeCorpusDir(t *testing.T) string {
	dir := os.Getenv("TLITE_NODE_CORPUS")
	if dir == "" {
		dir = DefaultNodeCorpusDir()
	}
	if _, err := NodeCases(dir); err == nil {
		return dir
	}
	tmp := dir + ".partial"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("..", "..", "tools", "onnx_node_corpus.py")
	out, err := exec.Command("/usr/bin/python3", script, "--out", tmp).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("generating the node corpus (tools/setup.sh installs python3-onnx): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		t.Fatal(err)
	}
	t.Logf("generated %s: %s", dir, strings.TrimSpace(string(out)))
	return dir
}

// TestNodeCorpus runs ONNX's own node test cases on the OpenCL device and
// on the pure-Go device and holds, on each: every case is classified (pass,
// host-only, out of scope with a reason, unsupported, or failed); a case
// that was correct before still is (the ratchet, one list for both); and no
// case of an operator the engine claims fails at run time or gives a wrong
// answer.
func TestNodeCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("the node corpus takes minutes on a cold kernel cache; not in -short")
	}
	dir := nodeCorpusDir(t)
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		t.Fatalf("the node corpus needs an OpenCL device (install pocl-opencl-icd): %v", err)
	}
	defer dev.Close()
	raw, err := os.ReadFile(nodePassingFile)
	if err != nil && !*update {
		t.Fatalf("the ratchet list: %v (create it with go test -run TestNodeCorpus -update)", err)
	}
	for _, d := range []struct {
		name string
		opts engine.Options
	}{{"opencl", engine.Options{Kernels: kernels.New(dev)}}, {"go", engine.Options{Device: "go"}}} {
		t.Run(d.name, func(t *testing.T) {
			r, err := RunDir(dir, d.opts, NodeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + r.Table())
			t.Log(r.Summary())
			if len(r.Cases) < 900 {
				t.Fatalf("only %d cases in %s; onnx 1.12 writes 945", len(r.Cases), dir)
			}
			for _, c := range r.Cases {
				if c.Status == Failed && claimed(c.Op) {
					t.Errorf("%s (%s, claimed): %s", c.Title, c.Op, c.Detail)
				}
			}
			correct := r.Correct()
			if *update {
				if d.name == "opencl" {
					if err := os.WriteFile(nodePassingFile, []byte(strings.Join(correct, "\n")+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					t.Logf("wrote %d correct cases to %s", len(correct), nodePassingFile)
				}
				return
			}
			checkRatchet(t, r, string(raw), correct)
		})
	}
}

// checkRatchet requires every case the list names to be correct still, and
// logs the cases correct now that it does not list.
func checkRatchet(t *testing.T, r *Report, list string, correct []string) {
	status := map[string]Case{}
	for _, c := range r.Cases {
		status[c.Title] = c
	}
	want := map[string]bool{}
	for _, title := range strings.Fields(list) {
		want[title] = true
		c, ok := status[title]
		switch {
		case !ok:
			t.Errorf("%s was correct before and is no longer in the corpus", title)
		case c.Status != Passed && c.Status != HostOnly:
			t.Errorf("%s was correct before and is now %s: %s", title, c.Status, c.Detail)
		}
	}
	var gained []string
	for _, title := range correct {
		if !want[title] {
			gained = append(gained, title)
		}
	}
	if len(gained) > 0 {
		t.Logf("%d cases are correct that the ratchet does not list yet (run with -update to keep them): %s", len(gained), strings.Join(gained, ", "))
	}
}
