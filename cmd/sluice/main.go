// Command sluice is the Sluice LLM gateway: one binary for the data plane, the
// control plane and their tools.
package main

import (
	"fmt"
	"io"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"gateway", "run the data plane: sluice gateway --config FILE | --platform URL --token T [--listen ADDR]", cmdGateway},
		{"validate", "check a deployment file: sluice validate FILE", cmdValidate},
		{"mock-llm", "run the OpenAI/Anthropic upstream simulator: sluice mock-llm [--listen ADDR]", cmdMockLLM},
		{"keys", "API key tools: sluice keys hash KEY | sluice keys new", cmdKeys},
		{"policies", "list policy definitions: sluice policies [schema NAME]", cmdPolicies},
		{"serve", "run the platform and a gateway in one process: sluice serve [--listen ADDR] [--admin-listen ADDR] [--data DIR]", cmdServe},
		{"platform", "run the control plane: sluice platform [--admin-listen ADDR] [--data DIR | --database URL]", cmdPlatform},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}
