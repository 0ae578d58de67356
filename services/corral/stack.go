package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// stack runs the services of one process, each until the process stops
// or one of them fails, and stops them in reverse order of start: each
// stops only once those started after it have stopped, so that what is
// still finishing its work finds what it relies on running.
type stack struct {
	failed chan struct{}
	fail   sync.Once
	procs  []*proc
}

// proc is one service of a stack.
type proc struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func newStack() *stack {
	return &stack{failed: make(chan struct{})}
}

// start runs the named service until the stack stops it. ctx gives the
// values of its context, not its end: [stack.wait] decides when it ends.
func (s *stack) start(ctx context.Context, name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proc{name: name, cancel: cancel, done: make(chan struct{})}
	s.procs = append(s.procs, p)
	go func() {
		defer close(p.done)
		if p.err = run(ctx); p.err != nil {
			p.err = fmt.Errorf("%s: %w", name, p.err)
			s.fail.Do(func() { close(s.failed) })
		}
	}()
}

// failure is closed when a service fails.
func (s *stack) failure() <-chan struct{} { return s.failed }

// wait waits until ctx is done or a service fails, then stops every
// service, last started first, and returns their errors.
func (s *stack) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-s.failed:
	}
	return s.stop()
}

// stop stops every service, last started first, each waited for before
// the next is stopped, and returns their errors.
func (s *stack) stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		p.cancel()
		<-p.done
		errs = append(errs, p.err)
	}
	s.procs = nil
	return errors.Join(errs...)
}
