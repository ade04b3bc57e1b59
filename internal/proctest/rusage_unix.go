//go:build unix

package proctest

import "syscall"

// Usage returns the CPU time (user + system, ns) and the minor page faults
// of this process so far: every goroutine's, which a benchmark's ns/op (the
// wall time) does not show on a machine with a core to spare. Zeros when
// the kernel refuses.
func Usage() (cpuNanos, minorFaults int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), int64(ru.Minflt)
}
