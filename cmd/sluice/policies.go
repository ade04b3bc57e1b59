package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"sluice/policydefs"
)

const policiesUsage = `usage:
  sluice policies                          list the policy definitions (name, version, description)
  sluice policies schema NAME [VERSION]    print the params JSON Schema (latest version by default)

The full catalog with every param is in docs/policies.md.
`

func cmdPolicies(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return listPolicies(stdout)
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, policiesUsage)
		return 0
	case "schema":
		if len(args) < 2 || len(args) > 3 {
			fmt.Fprint(stderr, "sluice policies schema: want NAME and an optional VERSION\n\n"+policiesUsage)
			return 2
		}
		return printSchema(args[1], args[2:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "sluice policies: unknown subcommand %q\n\n%s", args[0], policiesUsage)
	return 2
}

func listPolicies(stdout io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tDESCRIPTION")
	for _, d := range policydefs.All() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Name, d.Version, d.Description)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}

func printSchema(name string, version []string, stdout, stderr io.Writer) int {
	var (
		d  policydefs.Def
		ok bool
	)
	if len(version) == 1 {
		d, ok = policydefs.Get(name, version[0])
	} else {
		d, ok = policydefs.Latest(name)
	}
	if !ok {
		var names, versions []string
		seen := map[string]bool{}
		for _, e := range policydefs.All() {
			if !seen[e.Name] {
				seen[e.Name] = true
				names = append(names, e.Name)
			}
			if e.Name == name {
				versions = append(versions, e.Version)
			}
		}
		sort.Strings(names)
		if len(versions) > 0 {
			fmt.Fprintf(stderr, "sluice policies schema: policy %q has no version %q (known: %s)\n",
				name, version[0], strings.Join(versions, ", "))
		} else {
			fmt.Fprintf(stderr, "sluice policies schema: unknown policy %q (known: %s)\n",
				name, strings.Join(names, ", "))
		}
		return 1
	}
	// The schema is nested in its catalog file; re-indent it as a document.
	var buf bytes.Buffer
	if err := json.Indent(&buf, d.ParamsSchema, "", "  "); err != nil {
		fmt.Fprintf(stderr, "sluice policies schema: %s: %v\n", d.ID(), err)
		return 1
	}
	buf.WriteByte('\n')
	if _, err := stdout.Write(buf.Bytes()); err != nil {
		return 1
	}
	return 0
}
