package flash

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned for requests submitted to a closed Pool.
var ErrClosed = errors.New("flash: reader pool closed")

// Request is one read: len(Dst) bytes of File at Off. Err holds its outcome
// once its Batch is done.
type Request struct {
	File *File
	Off  int64
	Dst  []byte
	Err  error
}

// Batch is a set of requests submitted together; it completes when all of
// them have.
type Batch struct {
	reqs    []Request
	pending atomic.Int64
	done    chan struct{}
	start   time.Time
	end     time.Time
}

// Done is closed when every request of the batch has completed.
func (b *Batch) Done() <-chan struct{} { return b.done }

// Wait blocks until the batch completes and returns its requests' errors
// joined (nil if all succeeded). The requests' Dst buffers are filled.
func (b *Batch) Wait() error {
	<-b.done
	var errs []error
	for i := range b.reqs {
		if b.reqs[i].Err != nil {
			errs = append(errs, b.reqs[i].Err)
		}
	}
	return errors.Join(errs...)
}

// Elapsed is the time from Submit to the last completion (valid after Done).
func (b *Batch) Elapsed() time.Duration { return b.end.Sub(b.start) }

func (b *Batch) finish() {
	if b.pending.Add(-1) == 0 {
		b.end = time.Now()
		close(b.done)
	}
}

type job struct {
	b *Batch
	i int
}

// Pool reads asynchronously with a fixed queue depth: depth goroutines each
// issue one blocking pread at a time, which is how many requests the device
// sees in flight (Go has no io_uring). Requests start in submission order.
// Memory is bounded: each worker owns one DefaultScratch bounce buffer for
// unaligned requests, allocated on first use.
type Pool struct {
	depth  int
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []job
	closed bool
	wg     sync.WaitGroup
}

// NewPool starts a pool with the given queue depth (≥ 1).
func NewPool(depth int) (*Pool, error) {
	if depth < 1 || depth > 1024 {
		return nil, fmt.Errorf("flash: queue depth %d out of range [1, 1024]", depth)
	}
	p := &Pool{depth: depth}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(depth)
	for range depth {
		go p.worker()
	}
	return p, nil
}

// Depth is the pool's queue depth.
func (p *Pool) Depth() int { return p.depth }

// Submit queues reqs and returns at once. Each request is one pread: a
// planner that wants a run of adjacent extents read as one operation lists
// it as one request into one buffer and scatters afterwards (a memory copy
// is cheap next to an I/O operation on IOPS-bound storage). The pool owns reqs and their Dst
// buffers until the batch is done. Contiguous-run statistics follow the
// order of reqs, so callers should list requests in the order they want the
// device to see them.
func (p *Pool) Submit(reqs []Request) *Batch {
	b := &Batch{reqs: reqs, done: make(chan struct{}), start: time.Now()}
	live := 0
	for i := range reqs {
		r := &reqs[i]
		r.Err = nil
		switch {
		case r.File == nil:
			r.Err = fmt.Errorf("flash: request %d (offset %d length %d): no file", i, r.Off, len(r.Dst))
		case len(r.Dst) > 0:
			live++
		}
	}
	if live == 0 {
		b.end = b.start
		close(b.done)
		return b
	}
	b.pending.Store(int64(live))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		for i := range reqs {
			if reqs[i].File != nil && len(reqs[i].Dst) > 0 {
				reqs[i].Err = fmt.Errorf("flash: read %s offset %d length %d: %w", reqs[i].File.path, reqs[i].Off, len(reqs[i].Dst), ErrClosed)
			}
		}
		b.end = time.Now()
		close(b.done)
		return b
	}
	for i := range reqs {
		r := &reqs[i]
		if r.File != nil && len(r.Dst) > 0 {
			// Runs are recorded here, in submission order, not in the
			// workers' racy completion order.
			r.File.stats.issue(false, r.File, r.Off, int64(len(r.Dst)))
			p.queue = append(p.queue, job{b, i})
		}
	}
	p.mu.Unlock()
	p.cond.Broadcast()
	return b
}

// Read submits reqs and waits for them.
func (p *Pool) Read(reqs []Request) error { return p.Submit(reqs).Wait() }

func (p *Pool) worker() {
	defer p.wg.Done()
	var scratch []byte
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closed {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		j := p.queue[0]
		p.queue[0] = job{}
		p.queue = p.queue[1:]
		p.mu.Unlock()

		r := &j.b.reqs[j.i]
		r.Err = r.File.readIssued(r.Dst, r.Off, &scratch)
		j.b.finish()
	}
}

// Close waits for queued requests to finish and stops the workers.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	p.wg.Wait()
}
