// Command tl is tlite's command line: inspect, run and benchmark ONNX models
// on OpenCL devices.
//
//	tl inspect model.onnx [--json]
//	tl run model.onnx --input name=file.npy ... [--out dir] [--device d] [--precision fp32|fp16] [--profile]
//	tl bench model.onnx --shape name=1x3x224x224 ... [-r 10] [--json]
//	tl bench --model llm.onnx -p 128,1024 -n 64 [-r 5] [--json]
//	tl generate --model llm.onnx [--tokenizer tokenizer.json] --prompt "..." [-n 64]
//	tl perplexity --model llm.onnx --text heldout.txt
//	tl quantize in.onnx out.onnx --format e0m4|int4|fp16
//	tl conformance
//	tl devices
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand: its name, a one-line summary and its body.
type command struct {
	name, summary string
	run           func(args []string) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tl <command> [arguments]\n\ncommands:")
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'tl <command> -h' for a command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	name := os.Args[1]
	for _, c := range commands {
		if c.name == name {
			if err := c.run(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "tl %s: %v\n", name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "tl: unknown command %q\n", name)
	usage()
	os.Exit(2)
}

// splitArgs separates positional arguments from flags so that flags may come
// after the model path, as people type them ("tl inspect m.onnx --json").
// Flags that take a value are listed in valued.
func splitArgs(args []string, valued map[string]bool) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && valued[name] && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return flags, pos
}
