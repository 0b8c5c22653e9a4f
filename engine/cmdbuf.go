package engine

import (
	"fmt"
	"os"

	"github.com/tlite/tlite/opencl"
)

// Command buffers (Options.CommandBuffers): a replayed decode step still
// enqueues its launches one by one, each an entry into the driver. Where
// the device offers cl_khr_command_buffer, a run of consecutive device
// steps that all replay their recordings is joined into one recording and
// baked into a command buffer (opencl.Device.Bake), which then runs with a
// single enqueue. A buffer holds exactly what the joined recordings hold,
// so it is valid exactly as long as they are: for one replay generation
// (Session.replayGen, which changes with the binding and the
// configuration). An old generation's buffers are dropped when a new one
// first replays with command buffers on, or at Close (until then they are
// held, never run); the steps are recorded, joined and baked again.

// cmdbufState is a session's command buffers.
type cmdbufState struct {
	// segs are the command buffers of replay generation gen, by the
	// program index they start at; refused says the driver refused one
	// in that generation.
	segs    map[int]*segment
	gen     uint64
	refused bool
	stats   CommandBufferStats
}

// segment is a run of program instructions replayed as one command
// buffer: the device steps prog[start:end] (early instructions among them,
// already run, are skipped).
type segment struct {
	end     int
	members int // device steps joined
	rec     opencl.Recording
	// failed says the run could not be baked (too short, or the driver
	// refused): its steps replay one by one this generation.
	failed bool
}

// wantCommandBuffers is Options.CommandBuffers, or TLITE_CMDBUF=1/on in
// the environment. (TLITE_CMDBUF=0/off turns them off in package opencl,
// whatever the option says.)
func wantCommandBuffers(opt bool) bool {
	v := os.Getenv(opencl.CommandBuffersEnv)
	return opt || v == "1" || v == "on"
}

// commandBuffersOn reports whether this run may bake and replay command
// buffers: asked for, replaying, and on a device that has them.
func (s *Session) commandBuffersOn(replay bool) bool {
	return replay && s.cmdbuf && !s.profile && s.cl != nil && s.cl.HasCommandBuffers()
}

// bakeable reports whether in is a device step whose current recording
// replays (see Session.runDevice) and so may join a command buffer.
func (s *Session) bakeable(in *instr) bool {
	return in.replayable() && s.recorded(in) && in.rec.Len() > 0
}

// dropSegments releases every command buffer (a new replay generation,
// or Close).
func (s *Session) dropSegments() {
	for i, g := range s.cb.segs {
		g.rec.Reset()
		delete(s.cb.segs, i)
	}
}

// runSegment runs the device steps from prog[i] as one command buffer,
// baking it first if this generation has none yet, and returns the index
// after the last step it ran. It returns i, having run nothing, when they
// must run one by one: the run is too short or could not be baked.
func (s *Session) runSegment(prog []*instr, i int) (next int, err error) {
	if s.cb.gen != s.replayGen {
		s.dropSegments()
		s.cb.gen, s.cb.refused = s.replayGen, false
	}
	g := s.cb.segs[i]
	if g == nil && s.cb.refused {
		// The driver refused a buffer this generation: do not ask again
		// for every shorter run after it.
		return i, nil
	}
	if g == nil {
		g = &segment{end: i}
		launches := 0
		for j := i; j < len(prog); j++ {
			if prog[j].early {
				continue
			}
			if !s.bakeable(prog[j]) {
				break
			}
			g.end, g.members = j+1, g.members+1
			launches += prog[j].rec.Len()
		}
		if s.cb.segs == nil {
			s.cb.segs = map[int]*segment{}
		}
		s.cb.segs[i] = g
		// One launch gains nothing from a buffer.
		g.failed = launches < 2
		if !g.failed {
			for j := i; j < g.end; j++ {
				if !prog[j].early {
					g.rec.Append(prog[j].rec)
				}
			}
			if err := s.cl.Bake(&g.rec); err != nil {
				g.failed = true
				g.rec.Reset()
				s.cb.stats.LastError, s.cb.refused = err, true
			} else {
				s.cb.stats.Bakes++
			}
		}
	}
	if g.failed {
		return i, nil
	}
	// The members cannot change within a generation (a step that replays
	// is never recorded again in it), but check: a stale buffer must never
	// run.
	for j := i; j < g.end; j++ {
		if !prog[j].early && !s.bakeable(prog[j]) {
			g.rec.Reset()
			delete(s.cb.segs, i)
			return i, nil
		}
	}
	if err := s.cl.Replay(&g.rec); err != nil {
		in := prog[i]
		return i, fmt.Errorf("engine: node %q (%s): %w", in.node.Name, in.node.OpType, err)
	}
	s.replayed += int64(g.members)
	// Replay enqueues the launches one by one, having dropped the
	// buffer, when the driver refuses it: those steps did not run in one.
	if g.rec.Baked() {
		s.cb.stats.BakedRuns += int64(g.members)
	}
	return g.end, nil
}

// CommandBufferStats says how command buffers were used since Open: the
// buffers baked, the device steps run inside one, and the last error a
// bake met (nil if none).
type CommandBufferStats struct {
	Bakes     int64
	BakedRuns int64
	LastError error
}

// CommandBuffers reports the session's use of command buffers (see
// Options.CommandBuffers).
func (s *Session) CommandBuffers() CommandBufferStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cb.stats
}
