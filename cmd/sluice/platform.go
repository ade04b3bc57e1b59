package main

import (
	"fmt"
	"io"
)

func cmdPlatform(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice: not implemented yet")
	return 1
}
