package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tlite/tlite/engine/elastic"
)

func init() {
	register(command{"elastic", "elastic sub-models: build (reorder a model offline) or show its levels", runElastic})
}

// levelFlag is --level of generate and perplexity.
func levelFlag(fs *flag.FlagSet) *int {
	return fs.Int("level", 0, "elastic model: run the sub-model of this level in percent (20..100, as elastic.json beside the model lists; 0: not elastic)")
}

// applyLevel binds the elastic description beside model to the stepper's
// session and switches to level pct.
func applyLevel(st llmStepper, model string, pct int) (*elastic.Model, error) {
	spec, err := elastic.Load(model)
	if err != nil {
		return nil, err
	}
	em, err := elastic.Bind(st.Session(), spec)
	if err != nil {
		return nil, err
	}
	if err := em.SetLevel(pct); err != nil {
		return nil, err
	}
	lv, _ := spec.LevelOf(pct)
	fmt.Fprintf(statsOut, "tl: elastic level %d%% (order %s): %.1f%% of the layers' parameters, %.1f%% with embedding and LM head\n",
		pct, spec.Order, 100*lv.ParamsLayers, 100*lv.ParamsTotal)
	return em, nil
}

// benchLevels parses bench's --level list and binds the model when given;
// without it the one "level" 0 stands for the plain model.
func benchLevels(st llmStepper, model, list string) ([]int, *elastic.Model, error) {
	if list == "" {
		return []int{0}, nil, nil
	}
	var levels []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 || v > 100 {
			return nil, nil, fmt.Errorf("--level %q: want percentages 1..100, comma-separated", list)
		}
		levels = append(levels, v)
	}
	spec, err := elastic.Load(model)
	if err != nil {
		return nil, nil, err
	}
	em, err := elastic.Bind(st.Session(), spec)
	if err != nil {
		return nil, nil, err
	}
	for _, v := range levels {
		if _, err := spec.LevelOf(v); err != nil {
			return nil, nil, err
		}
	}
	return levels, em, nil
}

func setBenchLevel(em *elastic.Model, lv int) error {
	if em == nil {
		return nil
	}
	return em.SetLevel(lv)
}

func runElastic(args []string) error {
	const usage = "usage: tl elastic build --model DIR --out DIR --calib WORKDIR [--order importance|random|none] [--anchors 0.2] [--group 32] [--calib-tokens 6400] [--seed N]\n       tl elastic show DIR [--json]\n       tl elastic profile --model M [--tlm DIR] [--lengths 16,32,64,128,192] [--levels 20,40,60,80,100] [-r 3] [--out profile.json]\n       tl elastic trace --model M --grid grid_eval.jsonl [--tlm DIR] [--alpha -0.25,0,0.25] [--requests 30] [--strategies tlm,greedy,random,oracle] [--check N] [--out trace.json]"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("tl elastic: give build, show, profile or trace")
	}
	switch args[0] {
	case "show":
		return elasticShow(args[1:])
	case "build":
		return elasticBuild(args[1:])
	case "profile":
		return elasticProfile(args[1:])
	case "trace":
		return elasticTrace(args[1:])
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("tl elastic: %q: give build, show, profile or trace", args[0])
}

// elasticScript finds models/elastic/elastic.py: $TLITE_REPO, else the
// current directory and its parents, else beside the executable's parent.
func elasticScript() (string, error) {
	rel := filepath.Join("models", "elastic", "elastic.py")
	var roots []string
	if r := os.Getenv("TLITE_REPO"); r != "" {
		roots = append(roots, r)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			roots = append(roots, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		roots = append(roots, filepath.Dir(filepath.Dir(exe)))
	}
	for _, r := range roots {
		if p := filepath.Join(r, rel); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("tl elastic build: cannot find %s (run tl from the tlite checkout or set TLITE_REPO); the offline step is also run directly: /usr/bin/python3 %s build --model DIR --out DIR --calib WORKDIR", rel, rel)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// elasticBuild runs the offline step (PyTorch) with the given flags.
func elasticBuild(args []string) error {
	script, err := elasticScript()
	if err != nil {
		return err
	}
	py := os.Getenv("TLITE_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	cmd := exec.Command(py, append([]string{script, "build"}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tl elastic build: %s %s: %w", py, script, err)
	}
	return nil
}

// elasticShow prints the levels of an elastic model.
func elasticShow(args []string) error {
	fs := flag.NewFlagSet("elastic show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write elastic.json's levels as JSON")
	flags, pos := splitArgs(args, map[string]bool{})
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("tl elastic show: give one model folder (or model file)")
	}
	spec, err := elastic.Load(pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, spec)
	}
	fmt.Fprintf(stdout, "elastic model: %d layers, %d/%d heads of %d, FFN %d, order %s, anchors %v\n",
		spec.NLayers, spec.NHeads, spec.NKVHeads, spec.HeadDim, spec.FFN, spec.Order, spec.Anchors)
	t := newTable("level", "r_na", "params (layers)", "params (total)", "MACs (layers+head)", "q heads", "ffn").alignRight(0, 1, 2, 3, 4)
	for _, lv := range spec.Levels {
		var heads, ffn []string
		for _, l := range lv.Layers {
			heads = append(heads, strconv.Itoa(l.QHeads))
			ffn = append(ffn, strconv.Itoa(l.FFN))
		}
		t.add(fmt.Sprintf("%d%%", lv.Level), fmt.Sprintf("%.3f", lv.RNonAnchor), fmt.Sprintf("%.3f", lv.ParamsLayers),
			fmt.Sprintf("%.3f", lv.ParamsTotal), fmt.Sprintf("%.3f", lv.MACsWithHead), strings.Join(heads, ","), strings.Join(ffn, ","))
	}
	t.write(stdout)
	return nil
}
