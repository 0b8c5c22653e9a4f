package main

import (
	"flag"
	"fmt"

	"github.com/tlite/tlite/engine/conformance"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

func init() {
	register(command{"conformance", "run onnx-go's ONNX node-test corpus (opsets 9 and 10) through the engine and print a table by op", runConformance})
}

// opConformance is one operator's row of conformance --json.
type opConformance struct {
	Op               string `json:"op"`
	Cases            int    `json:"cases"`
	Passed           int    `json:"passed"`    // on the device
	HostOnly         int    `json:"host_only"` // correct, but no device kernel ran
	Failed           int    `json:"failed"`
	Unsupported      int    `json:"unsupported"`
	Supported        bool   `json:"supported"` // claimed and every case passes, at least one on the device
	Claimed          bool   `json:"claimed"`   // the engine lists the op as supported
	FirstFailure     string `json:"first_failure,omitempty"`
	FirstUnsupported string `json:"first_unsupported,omitempty"`
}

type conformanceJSON struct {
	Corpus      string          `json:"corpus"`
	Cases       int             `json:"cases"`
	Passed      int             `json:"passed"`
	HostOnly    int             `json:"host_only"`
	Failed      int             `json:"failed"`
	Unsupported int             `json:"unsupported"`
	Ops         []opConformance `json:"ops"`
}

func runConformance(args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write the per-op results as JSON")
	summary := fs.Bool("summary", false, "print only the summary line")
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl conformance [--json] [--summary] [--device d]\nRuns "+conformance.Corpus+".")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	if opts.Device != "go" {
		// One device for all cases (they share compiled programs), and no
		// table of refusals when there is no OpenCL platform at all.
		dev, err := opencl.Open(opencl.Options{Select: opts.Device, Priority: opts.Priority, Profile: opts.Profile})
		if err != nil {
			return fmt.Errorf("conformance needs an OpenCL device (or --device go for the pure-Go CPU device): %w", err)
		}
		defer dev.Close()
		opts.Kernels = kernels.New(dev)
	}
	rep := conformance.Run(opts)
	out := conformanceJSON{Corpus: conformance.Corpus, Ops: []opConformance{}}
	for _, s := range rep.ByOp() {
		out.Ops = append(out.Ops, opConformance{Op: s.Op, Cases: s.Cases, Passed: s.Passed, HostOnly: s.HostOnly, Failed: s.Failed, Unsupported: s.Unsupp,
			Supported: s.Supported, Claimed: s.Claimed, FirstFailure: s.FirstFailure, FirstUnsupported: s.FirstUnsupported})
		out.Cases += s.Cases
		out.Passed += s.Passed
		out.HostOnly += s.HostOnly
		out.Failed += s.Failed
		out.Unsupported += s.Unsupp
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "corpus: %s, %d cases\n\n", conformance.Corpus, out.Cases)
	if !*summary {
		t := newTable("op", "cases", "pass", "host", "fail", "unsup", "supported", "first problem").alignRight(1, 2, 3, 4, 5)
		for _, o := range out.Ops {
			sup := "no"
			switch {
			case o.Supported:
				sup = "yes"
			case o.Passed+o.HostOnly > 0:
				sup = "partly"
			}
			if o.Claimed && !o.Supported {
				sup += " (claimed)"
			}
			note := o.FirstFailure
			if note == "" {
				note = o.FirstUnsupported
			}
			if len(note) > 120 {
				note = note[:120] + "..."
			}
			t.add(o.Op, o.Cases, o.Passed, o.HostOnly, o.Failed, o.Unsupported, sup, note)
		}
		t.write(stdout)
		fmt.Fprintln(stdout, "supported: claimed and every case passes, at least one on the device; host: correct without reaching a device kernel; \"(claimed)\": the engine lists the op but some case fails or is unsupported")
	}
	fmt.Fprintln(stdout, rep.Summary())
	return nil
}
