// Package webui serves the web console: the Vite build of this directory's
// TypeScript sources, embedded in the binary so that `sluice serve` and
// `sluice platform` need no Node.js at run time. The build (make console)
// writes dist/console/; a binary built without it (go build on a fresh
// clone) serves a page saying so. The console drives only the platform's
// public API (/api/v1) from the same origin.
package webui

import (
	"embed"
	"io/fs"
)

// dist holds dist/.keep (committed, so the pattern always matches) and, after
// the build, dist/console/.
//
//go:embed all:dist
var dist embed.FS

// Build returns the embedded console build: the contents of dist/console, or
// an empty file system when the binary was built without it.
func Build() fs.FS {
	sub, err := fs.Sub(dist, "dist/console")
	if err != nil {
		panic(err) // fs.Sub fails only for an invalid path
	}
	return sub
}
