package main

import (
	"fmt"
	"io"
)

func cmdServe(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprintln(stdout, "usage: sluice serve\n\nRuns the platform and a gateway in one process (not implemented yet).")
		return 0
	}
	fmt.Fprintln(stderr, "sluice: not implemented yet")
	return 1
}

// isHelp reports whether args ask for a command's usage.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "--help")
}
