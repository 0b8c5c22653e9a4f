package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// inspect reports the limits a model's shapes rely on and the dynamic axes
// an export pinned, in the text and JSON forms.
func TestInspectLimitsAndPins(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  []string
		not   []string
	}{
		{"hf_gpt2", []string{
			"limit     past + seq <= 256 (node /wpe/Gather:",
			"limit     values of input_ids <= 319 (node /wte/Gather:",
		}, []string{"pinned", "assumed"}},
		{"hf_gqa_interleave", []string{
			"pinned    total = 2 (node /Add_2): the graph only runs with total = 2",
			"repeat_interleave",
			"assumed   node /layers.0/self_attn/MatMul:",
		}, nil},
	} {
		path := "../../testdata/models/" + tc.model + "/model.onnx"
		m, err := graph.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := infer.Run(m, infer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rep := buildInspect(path, m, res, nil, 4)
		m.Close()
		var buf bytes.Buffer
		printInspect(&buf, rep)
		text := buf.String()
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.model, w, text)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(text, w) {
				t.Errorf("%s: output has %q:\n%s", tc.model, w, text)
			}
		}
		if len(rep.Limits) == 0 {
			t.Errorf("%s: no limits in the JSON report", tc.model)
		}
		if (tc.model == "hf_gqa_interleave") != (len(rep.Pins) > 0) {
			t.Errorf("%s: pins %q", tc.model, rep.Pins)
		}
	}
}
