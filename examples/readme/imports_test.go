package readme_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExamplesUsePublicAPIOnly: no example program (its non-test files)
// imports an internal package, so each can be copied out of the repository
// and built against the published modules.
func TestExamplesUsePublicAPIOnly(t *testing.T) {
	files, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	programs := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "../internal/") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		if file.Name.Name == "main" {
			programs++
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "internal" || strings.HasPrefix(path, "internal/") || strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal") {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
	if programs < 3 {
		t.Fatalf("found the files of %d example programs, want at least 3 (cron, fencing, swap): %v", programs, files)
	}
}
