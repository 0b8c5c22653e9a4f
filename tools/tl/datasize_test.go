package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// TestRunDataDependentSize: a device tensor whose size only an input's
// value gives (Range(0, limit) cast on the device) is refused at Open with
// the flag that bounds it, named as the user can give it (--max r_0=<n>);
// tl run accepts that flag, runs inside it, and refuses a run beyond it
// naming the size to declare, on both backends.
func TestRunDataDependentSize(t *testing.T) {
	dir := t.TempDir()
	g := graphtest.Graph("range", []*graph.Node{
		graphtest.Node("Range", "range", []string{"start", "limit", "delta"}, []string{"r"}),
		graphtest.Node("Cast", "cast", []string{"r"}, []string{"y"}, graphtest.Int("to", 1)),
	}, []*graph.Value{graphtest.Init(graphtest.Int64s("start", nil, 0)), graphtest.Init(graphtest.Int64s("delta", nil, 1))},
		[]*graph.Value{graphtest.Value("limit", dtype.Int64)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
	model := filepath.Join(dir, "range.onnx")
	if err := os.WriteFile(model, graphtest.Bytes(graphtest.Model(17, g)), 0o644); err != nil {
		t.Fatal(err)
	}
	feed := func(limit string) string {
		p := filepath.Join(dir, "limit"+limit+".json")
		if err := os.WriteFile(p, []byte(`{"limit": {"dims": [], "type": "int64", "data": [`+limit+`]}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, dev := range []string{"go", "cpu"} {
		_, _, err := capture(t, runRun, model, "--device", dev, "--inputs", feed("5"))
		if err == nil || !strings.Contains(err.Error(), "--max r_0=<n>") || !strings.Contains(err.Error(), `node "range"`) {
			t.Errorf("%s: unbounded: %v; want the Range node and --max r_0=<n>", dev, err)
		}
		out, _, err := capture(t, runRun, model, "--device", dev, "--inputs", feed("5"), "--max", "r_0=8")
		if err != nil || !strings.Contains(out, "[5]") {
			t.Errorf("%s: --max r_0=8, limit 5: %v\n%s", dev, err, out)
		}
		_, _, err = capture(t, runRun, model, "--device", dev, "--inputs", feed("20"), "--max", "r_0=8")
		if err == nil || !strings.Contains(err.Error(), "--max r_0=20") {
			t.Errorf("%s: --max r_0=8, limit 20: %v; want a refusal naming --max r_0=20", dev, err)
		}
	}
}

// TestRunTokenIDsOutOfRange: tl run with token ids outside the embedding
// table (past its end, or negative) fails on both backends naming the
// input, the element, its value and the valid range, instead of reading
// zeros or a row from the table's end.
func TestRunTokenIDsOutOfRange(t *testing.T) {
	dir := t.TempDir()
	model := "../../testdata/models/gpt2/model.onnx"
	for _, id := range []string{"-5", "100000"} {
		p := filepath.Join(dir, "ids"+id+".json")
		if err := os.WriteFile(p, []byte(`{"input_ids": {"dims": [1, 3], "type": "int64", "data": [1, `+id+`, 2]}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dev := range []string{"go", "cpu"} {
			_, _, err := capture(t, runRun, model, "--device", dev, "--inputs", p)
			want := []string{`input "input_ids"`, "element [0 1] is " + id, "outside 0..255", "/wte/Gather"}
			for _, w := range want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("%s, id %s: %v; want %q", dev, id, err, w)
				}
			}
		}
	}
}
