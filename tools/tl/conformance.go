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
	switch {
	case *asJSON:
		return writeJSON(stdout, rep.ByOp())
	case *summary:
		fmt.Fprintf(stdout, "corpus: %s, %d cases\n", conformance.Corpus, len(rep.Cases))
	default:
		fmt.Fprint(stdout, rep.Table())
	}
	fmt.Fprintln(stdout, rep.Summary())
	return nil
}
