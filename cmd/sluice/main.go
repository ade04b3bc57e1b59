// Command sluice is the Sluice LLM gateway: one binary for the data plane, the
// control plane and their tools.
package main

import (
	"errors"
	"flag"
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
		{"bench", "load tests: sluice bench fairness --tenants N --duration D --mode fifo|rpm|fair --out DIR", cmdBench},
		{"version", "print the version and the Go version it was built with", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "sluice COMMAND --help (or sluice help COMMAND) describes a command's flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		if len(args) == 2 && args[0] == "help" {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return 0
	case "--version", "-version":
		return cmdVersion(nil, stdout, stderr)
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

// parseFlags parses a command's flags. -h and --help print the usage
// (synopsis and flags) on stdout and exit 0; a bad flag prints the problem
// and the usage on stderr and exits 2. ok is false when the command must
// return code at once.
func parseFlags(fs *flag.FlagSet, synopsis string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	printUsage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s\n\nflags:\n", synopsis)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, on the right stream
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout)
		return 0, false
	case err != nil:
		printUsage(stderr)
		return 2, false
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		printUsage(stderr)
		return 2, false
	}
	return 0, true
}
