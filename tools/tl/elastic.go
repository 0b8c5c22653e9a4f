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

// loraFlag is --lora of generate, perplexity and bench.
func loraFlag(fs *flag.FlagSet) *string {
	return fs.String("lora", "", `elastic model: LoRA adapters (lora/level-XX.bin files) to attach with --level: a folder, or "auto" for the lora folder beside the model; a level without a file runs its plain prefix (default: none)`)
}

// loraDir resolves --lora for model ("" when none is asked for).
func loraDir(model, flagVal string) string {
	if flagVal != "auto" {
		return flagVal
	}
	return filepath.Join(elastic.Dir(model), elastic.LoRADir)
}

// bindElastic binds the elastic description beside model to the stepper's
// session and attaches the adapters in lora (a folder; "" for none).
func bindElastic(st llmStepper, model, lora string) (*elastic.Model, error) {
	spec, err := elastic.Load(model)
	if err != nil {
		return nil, err
	}
	em, err := elastic.Bind(st.Session(), spec)
	if err != nil {
		return nil, err
	}
	if lora == "" {
		return em, nil
	}
	if fi, err := os.Stat(lora); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--lora %s: not a folder of level-XX.bin files", lora)
	}
	sets, err := elastic.ReadLoRADir(lora, spec)
	if err != nil {
		return nil, err
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("--lora %s: no level-XX.bin file in it", lora)
	}
	levels, err := em.AttachLoRA(sets)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(statsOut, "tl: LoRA adapters from %s for levels %v (rank %d, alpha %g)\n", lora, levels, sets[0].Rank, sets[0].Alpha)
	return em, nil
}

// applyLevel binds the elastic description beside model (and the adapters
// in lora, "" for none) to the stepper's session and switches to level pct.
func applyLevel(st llmStepper, model string, pct int, lora string) (*elastic.Model, error) {
	em, err := bindElastic(st, model, lora)
	if err != nil {
		return nil, err
	}
	if err := em.SetLevel(pct); err != nil {
		return nil, err
	}
	spec := em.Spec
	lv, _ := spec.LevelOf(pct)
	with := "without LoRA"
	if em.HasLoRA(pct) {
		with = "with LoRA"
	}
	fmt.Fprintf(statsOut, "tl: elastic level %d%% (order %s) %s: %.1f%% of the layers' parameters, %.1f%% with embedding and LM head\n",
		pct, spec.Order, with, 100*lv.ParamsLayers, 100*lv.ParamsTotal)
	return em, nil
}

// benchLevel is one entry of bench's --level list: a percentage, and for
// "N+lora" the level's adapters attached (plain N runs without them, so
// that N and N+lora interleave in one run).
type benchLevel struct {
	pct  int
	lora bool
}

func (b benchLevel) String() string {
	if b.lora {
		return fmt.Sprintf("%d+lora", b.pct)
	}
	return strconv.Itoa(b.pct)
}

// benchLevels parses bench's --level list and binds the model when given
// (with the adapters in lora, "" for none); without it the one level 0
// stands for the plain model.
func benchLevels(st llmStepper, model, list, lora string) ([]benchLevel, *elastic.Model, error) {
	if list == "" {
		if lora != "" {
			return nil, nil, fmt.Errorf("--lora needs --level")
		}
		return []benchLevel{{}}, nil, nil
	}
	var levels []benchLevel
	anyLoRA := false
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		num, withLoRA := strings.CutSuffix(f, "+lora")
		v, err := strconv.Atoi(num)
		if err != nil || v < 1 || v > 100 {
			return nil, nil, fmt.Errorf("--level %q: want percentages 1..100 (N+lora: with its adapters), comma-separated", list)
		}
		levels = append(levels, benchLevel{v, withLoRA})
		anyLoRA = anyLoRA || withLoRA
	}
	if anyLoRA && lora == "" {
		return nil, nil, fmt.Errorf("--level %q asks for LoRA: give --lora DIR or --lora auto", list)
	}
	em, err := bindElastic(st, model, lora)
	if err != nil {
		return nil, nil, err
	}
	for _, v := range levels {
		if _, err := em.Spec.LevelOf(v.pct); err != nil {
			return nil, nil, err
		}
		if v.lora && !em.HasLoRA(v.pct) {
			return nil, nil, fmt.Errorf("--level %s: %s has no adapters for level %d", v, lora, v.pct)
		}
	}
	return levels, em, nil
}

func setBenchLevel(em *elastic.Model, lv benchLevel) error {
	if em == nil {
		return nil
	}
	return em.SetLevelLoRA(lv.pct, lv.lora)
}

func runElastic(args []string) error {
	const usage = "usage: tl elastic build --model DIR --out DIR --calib WORKDIR [--importance taylor|proxy [--device go]] [--order importance|random|none] [--anchors 0.2] [--group 32] [--calib-tokens 6400] [--seed N]\n       tl elastic show DIR [--json]\n       tl elastic importance --model M --text FILE | --tokens FILE.npy --out FILE [--seq 256] [--windows 25] [--device go]\n       tl elastic memory --model ELASTIC [--lora DIR|auto] [--tlm DIR] | --models M1,M2,... [--prompt 64] [--ctx N] [--json]\n       tl elastic profile --model M [--tlm DIR] [--lengths 16,32,64,128,192] [--levels 20,40,60,80,100] [-r 3] [--out profile.json]\n       tl elastic trace --model M --grid grid_eval.jsonl [--tlm DIR] [--alpha -0.25,0,0.25] [--requests 30] [--strategies tlm,greedy,random,oracle] [--check N] [--out trace.json]"
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("tl elastic: give build, show, importance, memory, profile or trace")
	}
	switch args[0] {
	case "show":
		return elasticShow(args[1:])
	case "build":
		return elasticBuild(args[1:])
	case "importance":
		return elasticImportance(args[1:])
	case "memory":
		return elasticMemory(args[1:])
	case "profile":
		return elasticProfile(args[1:])
	case "trace":
		return elasticTrace(args[1:])
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("tl elastic: %q: give build, show, importance, memory, profile or trace", args[0])
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

// modelFile is the model a --model names: the path itself, or
// model.onnx inside it when it is a folder.
func modelFile(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return filepath.Join(p, "model.onnx")
	}
	return p
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// elasticBuild runs the offline step (PyTorch) with the given flags. With
// --importance proxy the units (and layers, by removal) are scored first by
// tlite itself, forward only (tl elastic importance), on the calibration
// windows elastic.py build draws, and build takes the scores from that file
// (OUT/importance.json; the windows are OUT/calib.npy).
func elasticBuild(args []string) error {
	imp, rest, err := takeFlag(args, "importance")
	if err != nil {
		return err
	}
	dev, rest, err := takeFlag(rest, "device")
	if err != nil {
		return err
	}
	switch imp {
	case "", "taylor":
		if dev != "" {
			return fmt.Errorf("tl elastic build: --device goes with --importance proxy (the Taylor scores are computed in PyTorch)")
		}
		return runElasticPy(append([]string{"build"}, rest...))
	case "proxy":
	default:
		return fmt.Errorf("tl elastic build: --importance %q: want taylor (PyTorch, the default) or proxy (tlite, forward only)", imp)
	}
	val := func(name string) string { v, _, _ := takeFlag(rest, name); return v }
	model, out, calib := val("model"), val("out"), val("calib")
	if model == "" || out == "" || calib == "" {
		return fmt.Errorf("tl elastic build --importance proxy: give --model, --out and --calib")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("tl elastic build: %w", err)
	}
	windows, scores := filepath.Join(out, "calib.npy"), filepath.Join(out, "importance.json")
	cargs := []string{"calib", "--calib", calib, "--out", windows}
	for _, f := range []string{"calib-tokens", "seed"} {
		if v := val(f); v != "" {
			cargs = append(cargs, "--"+f, v)
		}
	}
	if err := runElasticPy(cargs); err != nil {
		return err
	}
	iargs := []string{"--model", model, "--tokens", windows, "--out", scores, "--layers", "--windows", "0"}
	if dev != "" {
		iargs = append(iargs, "--device", dev)
	}
	if err := elasticImportance(iargs); err != nil {
		return err
	}
	return runElasticPy(append([]string{"build"}, append(rest, "--importance-from", scores)...))
}

// takeFlag removes --name V (or --name=V, -name V) from args and returns
// V ("" when absent) and the other arguments.
func takeFlag(args []string, name string) (string, []string, error) {
	var v string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		key := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || (key != name && !strings.HasPrefix(key, name+"=")) {
			rest = append(rest, a)
			continue
		}
		if k, x, ok := strings.Cut(key, "="); ok && k == name {
			v = x
			continue
		}
		if i+1 >= len(args) {
			return "", nil, fmt.Errorf("tl elastic build: --%s needs a value", name)
		}
		v = args[i+1]
		i++
	}
	return v, rest, nil
}

// runElasticPy runs models/elastic/elastic.py with args.
func runElasticPy(args []string) error {
	script, err := elasticScript()
	if err != nil {
		return err
	}
	py := os.Getenv("TLITE_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	cmd := exec.Command(py, append([]string{script}, args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tl elastic %s: %s %s: %w", args[0], py, script, err)
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
