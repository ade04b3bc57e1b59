//go:build !unix

package tokencount

func processCPU() int64 { return 0 }
