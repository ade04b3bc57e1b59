package main

import (
	"fmt"
	"io"
)

func cmdPolicies(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice: not implemented yet")
	return 1
}
