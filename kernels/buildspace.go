package kernels

import (
	"strings"

	"github.com/tlite/tlite/graph/quant"
)

// The build space: programs a launcher can build that the kernel tests do
// not all run. Tests keep PoCL builds few (a cold build of quant.cl costs
// seconds), so some variants are built only by the engine (the INT4
// decode GEMV at groups of 32 in fp32 storage, say) and a dump taken from
// the kernel tests alone missed them. declareBuildSpace walks a launcher's
// whole option space through the launcher's own choice of variant
// (qprogram for MatMulQ) and records each program in the build dump
// without building it, so that tools/kernelgate.sh compiles every one.

// recordBuild writes one (program, kernel) to the build dump when one is
// set; full is the exact text handed to the compiler.
func (l *Lib) recordBuild(family, full, options, name string) error {
	if l.dump == nil {
		return nil
	}
	how := "selected"
	if l.forced(family, name) {
		how = "forced"
	}
	return l.dump.record(l.profileName(), how, family, full, options, name)
}

// declare records the program kernel builds for (family, src, options,
// name) without building it: the gate compiles it, the device does not.
func (l *Lib) declare(family, src, options, name string) error {
	if l.envErr != nil {
		return l.envErr
	}
	return l.recordBuild(family, commonSrc+"\n"+src, strings.TrimSpace(options), name)
}

// quantGroups are the group sizes the space takes: one for each kind of
// program quant.cl makes of a group size. 32: a group per 32-weight chunk,
// 4-word vectors (QV), and qmt_mm's 2 x 2 half block; 64: 8-word vectors;
// 96: 4-word vectors and a group that is not a power of two (the chunk's
// group and offset are divisions by 12); 128: the default, 16-word
// vectors. Any other multiple of 32 builds one of these programs with
// another constant (256, say, is 128's program with two vector steps per
// group); each program costs the gate six compiles, so they are left out.
var quantGroups = []int{32, 64, 96, 128}

// quantSpaceRows are the row counts the space launches: every decode and
// prefill threshold of qpick lies below the largest.
const quantSpaceRows = 2 * qmtRows

// quantSpace lists one product for each (program, kernel) MatMulQ can build
// on l's device (or profile): both formats, the groups above, both
// layouts (the engine keeps the column layout on a GPU for weights it
// cannot tile), both storages, no bias or a bias in either storage, every
// row count up to quantSpaceRows, and on a GPU the tiled decode GEMV's
// weight read through images or buffers (qImages decides per device and
// weight). Sizes other than these do not change the program.
func (l *Lib) quantSpace() []qmm {
	imgs := []bool{false}
	if l.info().Type == "GPU" {
		imgs = append(imgs, true)
	}
	var out []qmm
	for _, f := range []quant.Format{quant.E0M4, quant.Int4} {
		for _, group := range quantGroups {
			for _, layout := range []QLayout{QLayoutColumns, QLayoutTile4} {
				for _, s := range []Storage{F32, F16} {
					for _, bias := range []struct {
						has bool
						s   Storage
					}{{false, F32}, {true, F32}, {true, F16}} {
						for m := 1; m <= quantSpaceRows; m++ {
							for _, img := range imgs {
								w := QBuf{Format: f, Group: group, Layout: layout, K: group, N: 4}
								out = append(out, qmm{w: w, s: s, hasBias: bias.has, bs: bias.s,
									m: m, n: 4, k: group, lda: group, ldc: 4, img: img})
							}
						}
					}
				}
			}
		}
	}
	return out
}

// declareBuildSpace records every program of the spaces above in the
// build dump (nothing without one) and returns how many distinct
// (options, kernel) pairs it declared.
func (l *Lib) declareBuildSpace() (int, error) {
	seen := map[[2]string]bool{}
	for _, g := range l.quantSpace() {
		options, name, _, _ := l.qprogram(g)
		key := [2]string{options, name}
		if seen[key] {
			continue
		}
		seen[key] = true
		if err := l.declare("quant", quantProg(), options, name); err != nil {
			return 0, err
		}
	}
	return len(seen), nil
}
