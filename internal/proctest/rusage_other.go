//go:build !unix

package proctest

// Usage reports zeros where getrusage(2) is not available.
func Usage() (cpuNanos, minorFaults int64) { return 0, 0 }
