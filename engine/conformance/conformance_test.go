package conformance

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// update rewrites the ratchet list with the cases passing now.
var update = flag.Bool("update", false, "rewrite testdata/passing.txt with the cases that pass now")

// passingFile is the ratchet: the corpus cases that passed on the device
// when it was last updated, one title a line.
var passingFile = filepath.Join("testdata", "passing.txt")

// TestConformance runs the whole corpus on the OpenCL backend, logs the
// per-operator table and the summary line, and requires every case of an
// operator the engine claims to support to pass or to be refused at Open
// as an unsupported use (an attribute, a rank, an element type) — never to
// produce a wrong result or fail at run time.
func TestConformance(t *testing.T) {
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		t.Fatalf("conformance needs an OpenCL device (install pocl-opencl-icd): %v", err)
	}
	defer dev.Close()
	r := Run(engine.Options{Kernels: kernels.New(dev)})
	t.Log("\n" + r.Table())
	t.Log(r.Summary())
	if len(r.Cases) < 100 {
		t.Fatalf("only %d corpus cases registered", len(r.Cases))
	}
	for _, s := range r.ByOp() {
		if s.Claimed && s.Failed > 0 {
			t.Errorf("%s: %d of %d cases fail: %s", s.Op, s.Failed, s.Cases, s.FirstFailure)
		}
	}
	passing := r.Passing()
	if len(passing) == 0 {
		t.Error("no case passed")
	}
	if *update {
		if err := os.WriteFile(passingFile, []byte(strings.Join(passing, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d passing cases to %s", len(passing), passingFile)
		return
	}
	// The ratchet: a case that passed on the device before must still
	// pass on the device (turning unsupported or host-only counts too).
	raw, err := os.ReadFile(passingFile)
	if err != nil {
		t.Fatalf("the ratchet list: %v (create it with go test -run TestConformance -update)", err)
	}
	status := map[string]Case{}
	for _, c := range r.Cases {
		status[c.Title] = c
	}
	want := map[string]bool{}
	for _, title := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if title == "" {
			continue
		}
		want[title] = true
		c, ok := status[title]
		switch {
		case !ok:
			t.Errorf("%s passed before and is no longer in the corpus", title)
		case c.Status != Passed:
			t.Errorf("%s passed before and is now %s: %s", title, c.Status, c.Detail)
		}
	}
	var gained []string
	for _, title := range passing {
		if !want[title] {
			gained = append(gained, title)
		}
	}
	if len(gained) > 0 {
		t.Logf("%d cases pass that the ratchet does not list yet (run with -update to keep them): %s", len(gained), strings.Join(gained, ", "))
	}
}
