package main

import (
	"flag"
	"fmt"

	"github.com/tlite/tlite/engine/conformance"
)

func init() {
	register(command{"conformance", "run the ONNX node-test corpus through the engine and print a table by op", runConformance})
}

func runConformance(args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write the per-op results as JSON")
	summary := fs.Bool("summary", false, "print only the summary line")
	sf := addSessionFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	rep := conformance.Run(opts)
	switch {
	case *asJSON:
		return writeJSON(stdout, rep.ByOp())
	case *summary:
	default:
		fmt.Fprint(stdout, rep.Table())
	}
	fmt.Fprintln(stdout, rep.Summary())
	return nil
}
