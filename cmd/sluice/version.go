package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time by the Makefile:
// -ldflags "-X main.version=$(git describe --always --dirty)".
var version string

// buildVersion is the binary's version: the one set at link time, else what
// the Go toolchain recorded (a module version, or the VCS revision with
// "-dirty" for a modified tree), else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: sluice version")
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: sluice version")
		return 2
	}
	fmt.Fprintf(stdout, "sluice %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
