package policies

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Closer is implemented by a policy instance that holds something of its
// own to release at the end of its life: a goroutine, a timer, a queue, a
// connection it opened itself.
//
// Contract:
//   - Close is called exactly once per instance, and only once no phase of
//     any request runs or will run on it: the gateway calls it when the
//     snapshot the instance belongs to has drained (it was replaced by a
//     reload, or the gateway shut down, and every request that started on it
//     has had its final call), and BuildChain calls it for the instances of a
//     chain that failed to build.
//   - Close must not close what the instance was handed in Services (the
//     counter store, the pricing catalog, the key index, the metrics
//     registry) or any other process-lifetime service: those belong to the
//     wiring that created them and outlive every instance.
//   - An error is logged by the caller; it does not stop other instances
//     from being closed. Close should not block for long: the gateway calls
//     it on a goroutine of its own, but shutdown waits for it.
type Closer interface {
	Close() error
}

// Close ends the life of the chain's instances: it calls Close on each that
// is a Closer, in reverse list order (the reverse of construction), and
// returns their errors joined; a panic in Close is recovered and returned as
// an error. Only the first call does anything. The caller guarantees that no
// request runs on the chain any more.
func (c *Chain) Close() error {
	if c == nil || !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	return closeEntries(c.entries)
}

// closeEntries closes the Closers among entries, in reverse order.
func closeEntries(entries []Entry) error {
	var errs []error
	for i := len(entries) - 1; i >= 0; i-- {
		cl, ok := entries[i].Policy.(Closer)
		if !ok {
			continue
		}
		if err := closeOne(cl); err != nil {
			errs = append(errs, fmt.Errorf("%s (chain position %d, instance %s): %w",
				entries[i].Def.ID(), i, entries[i].Route.InstanceID, err))
		}
	}
	return errors.Join(errs...)
}

func closeOne(cl Closer) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("close panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return cl.Close()
}
