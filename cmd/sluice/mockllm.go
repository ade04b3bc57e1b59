package main

import (
	"fmt"
	"io"
)

func cmdMockLLM(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sluice: not implemented yet")
	return 1
}
