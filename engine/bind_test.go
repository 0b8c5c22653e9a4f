package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/tlite/tlite/symshape"
)

func llamaPorts() []Port {
	batch, seq, past := symshape.Sym("batch"), symshape.Sym("seq"), symshape.Sym("past")
	return []Port{
		{Name: "input_ids", Shape: []symshape.Expr{batch, seq}},
		{Name: "attention_mask", Shape: []symshape.Expr{batch, symshape.Add(past, seq)}},
		{Name: "past.0.key", Shape: []symshape.Expr{batch, symshape.Const(2), past, symshape.Const(16)}},
	}
}

func TestBindSolvesDerivedDims(t *testing.T) {
	// attention_mask alone binds nothing directly; once seq is known from
	// input_ids, past + seq = 12 solves past = 9 - with past.0.key absent.
	ports := llamaPorts()[:2]
	b, err := bindShapes(ports, map[string][]int{"input_ids": {1, 3}, "attention_mask": {1, 12}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b["past"] != 9 || b["seq"] != 3 || b["batch"] != 1 {
		t.Fatalf("binding %v", b)
	}
}

func TestBindConflictNamesBothInputs(t *testing.T) {
	_, err := bindShapes(llamaPorts(), map[string][]int{
		"input_ids": {1, 3}, "attention_mask": {1, 12}, "past.0.key": {1, 2, 8, 16},
	}, nil)
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("want InputError, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"attention_mask", "past + seq", "past=8 from past.0.key[2]", "seq=3 from input_ids[1]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestBindConstantAndRankAndMax(t *testing.T) {
	ports := llamaPorts()
	if _, err := bindShapes(ports, map[string][]int{"past.0.key": {1, 3, 8, 16}}, nil); err == nil ||
		!strings.Contains(err.Error(), "axis 1 is 3") {
		t.Errorf("constant dim mismatch: %v", err)
	}
	if _, err := bindShapes(ports, map[string][]int{"input_ids": {1, 3, 1}}, nil); err == nil ||
		!strings.Contains(err.Error(), "rank 3") {
		t.Errorf("rank mismatch: %v", err)
	}
	if _, err := bindShapes(ports, map[string][]int{"input_ids": {1, 300}}, map[string]int64{"seq": 256}); err == nil ||
		!strings.Contains(err.Error(), "maximum 256") {
		t.Errorf("above max: %v", err)
	}
	if _, err := bindShapes(ports[1:2], map[string][]int{"attention_mask": {1, 12}}, nil); err == nil ||
		!strings.Contains(err.Error(), "cannot be solved") {
		t.Errorf("underdetermined: %v", err)
	}
}
