//go:build !unix

package spool

import "os"

// lockDir opens the lock file; without flock(2) it guards nothing, and two
// processes must not share a spool directory.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
}

func unlockDir(f *os.File) { f.Close() }
