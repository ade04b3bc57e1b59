// Package layout holds the test of the repository's import rule; it has no
// code of its own.
//
// The rule (docs/architecture.md): imports point one way,
//
//	cmd, bench, e2e -> internal/app (the wiring) -> {gateway, platform}
//	  -> policies -> {counter, admission, meter} -> deployment
//	  -> leaves (sharedctx, gwerror, llmapi, dialect, sse, tokencount, pricing, ...)
//
// and gateway and platform never import each other: they meet at the
// deployment document. A package may import a package of a lower layer, or
// one of its own component (gateway/pull may import gateway). Every package
// of the module must be placed in the table of layout_test.go, so a new
// package is placed deliberately, not by accident. Only the imports of
// non-test files are checked: a test may assemble what it needs.
package layout
