// Package interrupt answers whether the start was asked to stop: SIGTERM,
// SIGINT or SIGHUP while infera-exec prepares the container (a pod deleted
// during a slow interpreter probe, a Ctrl-C by hand). As PID 1 the kernel
// gives these signals no default action, so without a handler they would
// be lost; with Go's default one the process would die mid-step without a
// word.
package interrupt

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// Watch is a watch for the stop signals, and a context cancelled when one
// arrives, so that the running step's children (the interpreter probe)
// are ended and the step returns.
type Watch struct {
	ch     chan os.Signal
	got    atomic.Value // os.Signal
	cancel context.CancelFunc
	done   chan struct{}
}

// Signals are the signals that stop a start.
var Signals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// Start begins watching; Stop ends it.
func Start(parent context.Context) (context.Context, *Watch) {
	ctx, cancel := context.WithCancel(parent)
	w := &Watch{ch: make(chan os.Signal, 1), cancel: cancel, done: make(chan struct{})}
	signal.Notify(w.ch, Signals...)
	go func() {
		select {
		case s := <-w.ch:
			w.got.Store(s)
			cancel()
		case <-w.done:
		}
	}()
	return ctx, w
}

// Signal is the stop signal that arrived, or nil.
func (w *Watch) Signal() os.Signal {
	if s, ok := w.got.Load().(os.Signal); ok {
		return s
	}
	return nil
}

// Code is the exit code for a start stopped by s: 128+N, as a shell
// reports a process killed by signal N.
func Code(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128
}

// Stop ends the watch and gives the signals back their default handling
// (the worker, exec'd next, or the init, sets its own).
func (w *Watch) Stop() {
	signal.Stop(w.ch)
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.cancel()
}
