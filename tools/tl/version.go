package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/tlite/tlite/opencl"
)

func init() {
	register(command{"version", "print tl's version, commit, Go version and the OpenCL devices seen", runVersion})
}

// versionInfo is what version prints; --json writes it as is.
type versionInfo struct {
	Module   string          `json:"module"`
	Version  string          `json:"version"`
	Commit   string          `json:"commit"`
	Modified bool            `json:"modified"`
	Go       string          `json:"go"`
	OS       string          `json:"os"`
	Arch     string          `json:"arch"`
	Devices  []versionDevice `json:"opencl_devices"`
	OpenCL   string          `json:"opencl_error,omitempty"`
}

type versionDevice struct {
	Index string `json:"index"`
	Type  string `json:"type"`
	Name  string `json:"name"`
}

func runVersion(args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write the information as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl version [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	v := versionInfo{Module: "github.com/tlite/tlite", Version: "(devel)", Commit: "unknown", Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Devices: []versionDevice{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = bi.Main.Path
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if list, err := opencl.List(); err != nil {
		v.OpenCL = err.Error()
	} else {
		for _, d := range list {
			v.Devices = append(v.Devices, versionDevice{Index: d.Index, Type: d.Type, Name: d.Name})
		}
	}
	if *asJSON {
		return writeJSON(stdout, v)
	}
	commit := v.Commit
	if v.Modified {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(stdout, "tl %s %s\ncommit  %s\ngo      %s %s/%s\n", v.Module, v.Version, commit, v.Go, v.OS, v.Arch)
	if v.OpenCL != "" {
		fmt.Fprintf(stdout, "opencl  none: %s (--device go still works)\n", v.OpenCL)
	}
	for _, d := range v.Devices {
		fmt.Fprintf(stdout, "opencl  %s %s %s\n", d.Index, d.Type, d.Name)
	}
	return nil
}
