package serve

import (
	"sync"
	"time"
)

// scheduler runs jobs one at a time on the single model, fairly across
// contexts: each context (key) has its own FIFO of jobs, and the contexts
// with work wait in one FIFO of their own. The worker takes the first
// context, runs its oldest job, and puts the context back at the end of
// the line if it has more. So jobs of one context run in arrival order,
// one at a time, and a client that queues many calls on one context
// delays another context's call by at most one call per context ahead of
// it (round robin), not by its whole backlog.
type scheduler struct {
	mu      sync.Mutex
	cond    *sync.Cond
	ready   []string
	pending map[string][]*job
	closed  bool
	done    chan struct{}
	// current is the key of the job running now (noKey when none).
	current string
}

// job is one unit of work on the model.
type job struct {
	key    string
	run    func()
	queued time.Time
	start  time.Time
	// done closes when run has returned or the job was withdrawn.
	done    chan struct{}
	started bool
}

func newScheduler() *scheduler {
	s := &scheduler{pending: map[string][]*job{}, done: make(chan struct{}), current: noKey}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s
}

// submit queues run under key. It returns nil after close.
func (s *scheduler) submit(key string, run func()) *job {
	j := &job{key: key, run: run, queued: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if len(s.pending[key]) == 0 && !s.running(key) {
		s.ready = append(s.ready, key)
	}
	s.pending[key] = append(s.pending[key], j)
	s.cond.Signal()
	return j
}

// noKey is scheduler.current when no job runs (no context key has it).
const noKey = "\x00"

func (s *scheduler) running(key string) bool { return s.current == key }

// withdraw removes j if it has not started and reports whether it did.
func (s *scheduler) withdraw(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.started {
		return false
	}
	q := s.pending[j.key]
	for i, x := range q {
		if x == j {
			s.pending[j.key] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(s.pending[j.key]) == 0 {
		delete(s.pending, j.key)
		for i, k := range s.ready {
			if k == j.key {
				s.ready = append(s.ready[:i:i], s.ready[i+1:]...)
				break
			}
		}
	}
	close(j.done)
	return true
}

// depth is the number of jobs waiting.
func (s *scheduler) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.pending {
		n += len(q)
	}
	return n
}

func (s *scheduler) loop() {
	defer close(s.done)
	s.mu.Lock()
	for {
		for len(s.ready) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.ready) == 0 && s.closed {
			s.mu.Unlock()
			return
		}
		key := s.ready[0]
		s.ready = s.ready[1:]
		q := s.pending[key]
		j := q[0]
		if len(q) == 1 {
			delete(s.pending, key)
		} else {
			s.pending[key] = q[1:]
		}
		j.started = true
		j.start = time.Now()
		s.current = key
		s.mu.Unlock()
		j.run()
		close(j.done)
		s.mu.Lock()
		s.current = noKey
		if len(s.pending[key]) > 0 {
			s.ready = append(s.ready, key)
		}
	}
}

// close lets the queued jobs run, refuses new ones and waits for the
// worker to finish.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
}
