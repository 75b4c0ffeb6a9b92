package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The size of the house's rooms: no non-test file over maxFileLines lines,
// no function (or function literal) over maxFuncLines lines of body. A file
// or function that grows past them holds more than one thing.
const (
	maxFileLines = 800
	maxFuncLines = 120
)

// TestShape checks every non-test Go file of the module against the limits.
func TestShape(t *testing.T) {
	root := filepath.Join("..", "..")
	var problems []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		problems = append(problems, shapeOf(t, root, p)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// shapeOf returns what is too long in one file.
func shapeOf(t *testing.T, root, p string) []string {
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, p)
	var out []string
	if n := strings.Count(string(src), "\n"); n > maxFileLines {
		out = append(out, fmt.Sprintf("%s: %d lines, more than %d: split it by what its parts own", rel, n, maxFileLines))
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, p, src, 0)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		name := "a function literal"
		switch x := n.(type) {
		case *ast.FuncDecl:
			body, name = x.Body, x.Name.Name
		case *ast.FuncLit:
			body = x.Body
		}
		if body != nil {
			from, to := fset.Position(body.Lbrace).Line, fset.Position(body.Rbrace).Line
			if to-from > maxFuncLines {
				out = append(out, fmt.Sprintf("%s:%d: %s is %d lines long, more than %d", rel, from, name, to-from, maxFuncLines))
			}
		}
		return true
	})
	return out
}
