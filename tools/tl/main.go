// Command tl is tlite's command line: inspect, run and benchmark ONNX models
// on OpenCL devices.
//
//	tl inspect model.onnx [--json]
//	tl run model.onnx --input name=file.npy ... | --inputs DIR|file.json [--out dir] [--device d] [--json]
//	tl bench model.onnx --shape name=1x3x224x224 ... [-r 10] [--json]
//	tl bench --model llm.onnx -p 128,1024 -n 64 [-r 5] [--json]
//	tl generate --model llm.onnx [--tokenizer tokenizer.json] --prompt "..." | --tokens 1,2,3 [-n 64] [--json]
//	tl perplexity --model llm.onnx --text heldout.txt
//	tl quantize in.onnx out.onnx --format e0m4|int4|fp16
//	tl embed --model-dir DIR --image a.jpg --text "a photo of a dog" [--similarity]
//	tl serve --model llm.onnx --state-dir DIR [--addr 127.0.0.1:8080 | --socket PATH]
//	tl chat [--server URL] [--ctx ID]
//	tl conformance
//	tl devices
//	tl version
//	tl help CMD
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
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

func init() {
	register(command{"help", "describe a command's flags: tl help CMD", nil})
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tl <command> [arguments]\n\ncommands:")
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'tl help <command>' or 'tl <command> -h' for a command's flags.")
}

func main() { os.Exit(dispatch(os.Args[1:])) }

// dispatch runs the command line args (without the program name) and
// returns the exit status: 0 for success and for help asked for, 1 for a
// failed command, 2 for a command line that names no command.
func dispatch(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help", "-help":
		usage(os.Stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(os.Stdout)
			return 0
		}
		c := lookup(args[1])
		if c != nil && c.run == nil { // tl help help
			usage(os.Stdout)
			return 0
		}
		if c == nil {
			fmt.Fprintf(os.Stderr, "tl help: unknown command %q\n", args[1])
			usage(os.Stderr)
			return 2
		}
		if err := c.run([]string{"-h"}); err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "tl %s: %v\n", c.name, err)
			return 1
		}
		return 0
	}
	c := lookup(name)
	if c == nil || c.run == nil {
		fmt.Fprintf(os.Stderr, "tl: unknown command %q\n", name)
		usage(os.Stderr)
		return 2
	}
	if err := c.run(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the flag package printed the usage
		}
		fmt.Fprintf(os.Stderr, "tl %s: %v\n", name, err)
		return 1
	}
	return 0
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// splitArgs separates positional arguments from flags so that flags may come
// after the model path, as people type them ("tl inspect m.onnx --json").
// Flags that take a value are listed in valued.
func splitArgs(args []string, valued map[string]bool) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || isNumber(a) {
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

// isNumber reports whether a looks like a negative number ("-5"), which is
// a value, not a flag.
func isNumber(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	for _, r := range a[1:] {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return true
}
