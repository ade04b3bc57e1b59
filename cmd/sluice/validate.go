package main

import (
	"errors"
	"fmt"
	"io"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/policies"
	"sluice/policies/builtin"
)

// cmdValidate checks a deployment file as a gateway would load it: syntax,
// fields, references and every policy chain against the built-in policies.
// Exit status: 0 valid, 1 invalid (one problem per line on stderr), 2 usage.
func cmdValidate(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprintln(stdout, "usage: sluice validate FILE")
		return 0
	}
	if len(args) != 1 || args[0] == "" {
		fmt.Fprintln(stderr, "usage: sluice validate FILE")
		return 2
	}
	file := args[0]
	d, err := yamlfile.LoadChecked(file, policies.NewChecker(builtin.Registry()).CheckChains)
	if err != nil {
		var errs deployment.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e)
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", file, err)
		}
		return 1
	}
	n := 0
	for _, r := range d.Routes {
		n += len(r.Policies)
	}
	fmt.Fprintf(stdout, "%s: ok (%d routes, %d policies)\n", file, len(d.Routes), n)
	return 0
}
