package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// TestPriorityFlag: --priority maps to the OpenCL priority hint and
// --flush-every to engine.Options.FlushEvery; a bad value is refused.
func TestPriorityFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want opencl.Priority
		bad  bool
	}{
		{nil, opencl.PriorityDefault, false},
		{[]string{"--priority", "low"}, opencl.PriorityLow, false},
		{[]string{"--priority=HIGH"}, opencl.PriorityHigh, false},
		{[]string{"--priority", "normal", "--flush-every", "8"}, opencl.PriorityDefault, false},
		{[]string{"--priority", "urgent"}, 0, true},
	} {
		opts, err := parseSessionFlags(t, tc.args)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "--priority") {
				t.Errorf("%v: error %v", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if opts.Priority != tc.want {
			t.Errorf("%v: priority %v, want %v", tc.args, opts.Priority, tc.want)
		}
		if len(tc.args) == 4 && opts.FlushEvery != 8 {
			t.Errorf("%v: FlushEvery %d", tc.args, opts.FlushEvery)
		}
	}
}

// TestAttnPrecisionFlag: --attn-precision maps to
// engine.Options.AttentionPrecision (auto when absent); a bad value is
// refused naming the flag.
func TestAttnPrecisionFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want kernels.AttnPrecision
		bad  bool
	}{
		{nil, kernels.AttnAuto, false},
		{[]string{"--attn-precision", "fp32"}, kernels.AttnFP32, false},
		{[]string{"--attn-precision=FP16", "--precision", "fp16"}, kernels.AttnFP16, false},
		{[]string{"--attn-precision", "auto"}, kernels.AttnAuto, false},
		{[]string{"--attn-precision", "bf16"}, 0, true},
	} {
		opts, err := parseSessionFlags(t, tc.args)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "--attn-precision") {
				t.Errorf("%v: error %v", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if opts.AttentionPrecision != tc.want {
			t.Errorf("%v: attention precision %v, want %v", tc.args, opts.AttentionPrecision, tc.want)
		}
	}
}

// parseSessionFlags parses args with the shared session flags and returns
// the engine options they give (a parse failure fails the test: the cases
// check what options() makes of flags that parse).
func parseSessionFlags(t *testing.T, args []string) (engine.Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	sf := addSessionFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return sf.options()
}
