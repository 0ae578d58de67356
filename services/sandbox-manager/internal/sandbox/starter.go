package sandbox

import (
	"errors"
	"runtime"
)

// errClosed is returned for work asked of a closed [Driver].
var errClosed = errors.New("sandbox driver closed")

// starter starts processes from one OS thread that lives as long as the
// Driver.
//
// bwrap --die-with-parent sets PR_SET_PDEATHSIG on bwrap itself, and
// Pdeathsig is set on it here too, so that no sandbox outlives the manager.
// But the kernel sends that signal when the parent *thread* exits, not the
// parent process (see golang/go#27505), and Go ends a thread whenever a
// goroutine exits while locked to it. Had bwrap been forked from an
// ordinary goroutine, some unrelated code that locks a thread and returns
// could kill a live sandbox. Forking every bwrap from a goroutine that stays
// locked to its own thread makes the signal fire exactly when the manager
// process dies, or when [Driver.Close] ends the thread after killing every
// sandbox.
type starter struct {
	reqs chan func()
	done chan struct{} // closed by the Driver to stop the thread
	exit chan struct{} // closed when the goroutine has ended
}

func newStarter() *starter {
	s := &starter{reqs: make(chan func()), done: make(chan struct{}), exit: make(chan struct{})}
	go s.loop()
	return s
}

func (s *starter) loop() {
	defer close(s.exit)
	// Never unlocked: when the goroutine ends, so does the thread, and with
	// it any bwrap still running, which is what Close wants.
	runtime.LockOSThread()
	for {
		select {
		case f := <-s.reqs:
			f()
		case <-s.done:
			return
		}
	}
}

// do runs f on the starter's thread and waits for it, or returns errClosed
// if the starter has stopped.
func (s *starter) do(f func()) error {
	ran := make(chan struct{})
	select {
	case s.reqs <- func() { f(); close(ran) }:
		<-ran
		return nil
	case <-s.done:
		return errClosed
	}
}

// stop ends the starter's thread and waits for it.
func (s *starter) stop() {
	close(s.done)
	<-s.exit
}
