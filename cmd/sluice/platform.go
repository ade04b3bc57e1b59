package main

import (
	"fmt"
	"io"
)

func cmdPlatform(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprintln(stdout, "usage: sluice platform\n\nRuns the control plane alone (not implemented yet).")
		return 0
	}
	fmt.Fprintln(stderr, "sluice: not implemented yet")
	return 1
}
