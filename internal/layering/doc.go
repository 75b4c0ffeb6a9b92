// Package layering owns the import layers of the module, written down as
// rules and checked on the transitive imports (go list -deps) by its test.
// The depguard rules of .golangci.yml check the direct imports of a file;
// a package can still reach a higher one through a middle package, and
// this test is what catches that. docs/architecture.md draws the layers;
// docs/lint.md lists the rules.
package layering
