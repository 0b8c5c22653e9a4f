package main

import (
	"flag"
	"fmt"

	"github.com/tlite/tlite/engine/conformance"
)

func init() {
	register(command{"conformance", "run onnx-go's ONNX node-test corpus (opsets 9-10) through the engine, by op", runConformance})
}

// conformanceCorpus says what conformance runs, so that its counts are
// read for what they are.
const conformanceCorpus = "onnx-go's backend test corpus (github.com/owulveryck/onnx-go/backend/testbackend/onnx): ONNX node tests of opsets 9 and 10"

// opConformance is one operator's row of conformance --json.
type opConformance struct {
	Op               string `json:"op"`
	Cases            int    `json:"cases"`
	Passed           int    `json:"passed"`
	Failed           int    `json:"failed"`
	Unsupported      int    `json:"unsupported"`
	Supported        bool   `json:"supported"` // every case passed
	Claimed          bool   `json:"claimed"`   // the engine lists the op as supported
	FirstFailure     string `json:"first_failure,omitempty"`
	FirstUnsupported string `json:"first_unsupported,omitempty"`
}

type conformanceJSON struct {
	Corpus      string          `json:"corpus"`
	Cases       int             `json:"cases"`
	Passed      int             `json:"passed"`
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
		fmt.Fprintln(fs.Output(), "usage: tl conformance [--json] [--summary] [--device d]\nRuns "+conformanceCorpus+".")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	rep := conformance.Run(opts)
	out := conformanceJSON{Corpus: conformanceCorpus, Ops: []opConformance{}}
	for _, s := range rep.ByOp() {
		out.Ops = append(out.Ops, opConformance{Op: s.Op, Cases: s.Cases, Passed: s.Passed, Failed: s.Failed, Unsupported: s.Unsupp,
			Supported: s.Cases > 0 && s.Passed == s.Cases, Claimed: s.Claimed, FirstFailure: s.FirstFailure, FirstUnsupported: s.FirstUnsupported})
		out.Cases += s.Cases
		out.Passed += s.Passed
		out.Failed += s.Failed
		out.Unsupported += s.Unsupp
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "corpus: %s, %d cases\n\n", conformanceCorpus, out.Cases)
	if !*summary {
		t := newTable("op", "cases", "pass", "fail", "unsup", "supported", "first problem").alignRight(1, 2, 3, 4)
		for _, o := range out.Ops {
			sup := "no"
			switch {
			case o.Supported:
				sup = "yes"
			case o.Passed > 0:
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
			t.add(o.Op, o.Cases, o.Passed, o.Failed, o.Unsupported, sup, note)
		}
		t.write(stdout)
		fmt.Fprintln(stdout, "supported: every case passes; \"(claimed)\": the engine lists the op but some case fails or is unsupported")
	}
	fmt.Fprintln(stdout, rep.Summary())
	return nil
}
