package distlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/conformance"
)

// TestExportedIdentifiersDocumented keeps the godoc promise: every package
// has a package comment and every exported identifier a doc comment.
func TestExportedIdentifiersDocumented(t *testing.T) {
	fset := token.NewFileSet()
	pkgDoc := map[string]bool{}
	err := walkLibraryFiles(func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, ok := pkgDoc[dir]; !ok {
			pkgDoc[dir] = false
		}
		if f.Doc != nil {
			pkgDoc[dir] = true
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil || !receiverExported(d) {
					continue
				}
				t.Errorf("%s: exported func %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && d.Doc == nil && s.Doc == nil {
							t.Errorf("%s: exported type %s has no doc comment", fset.Position(s.Pos()), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
								t.Errorf("%s: exported %s has no doc comment", fset.Position(n.Pos()), n.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, ok := range pkgDoc {
		if !ok {
			t.Errorf("package in %s has no package comment", dir)
		}
	}
}

// receiverExported reports whether a method's receiver type is exported (a
// method of an unexported type is not part of the API), or d is a function.
func receiverExported(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

// maxPackageDocLines is about a screen: a package doc says what the package
// guarantees and how to use it, and links a page under docs/ for the long
// arguments.
const maxPackageDocLines = 80

// packageDocs returns the package comment of every package in the
// repository (every module's), keyed by the file that holds it.
func packageDocs(t *testing.T) map[string]*ast.CommentGroup {
	t.Helper()
	fset := token.NewFileSet()
	docs := map[string]*ast.CommentGroup{}
	err := walkLibraryFiles(func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Doc != nil {
			docs[path] = f.Doc
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestPackageDocsFitAScreen keeps package docs short.
func TestPackageDocsFitAScreen(t *testing.T) {
	for path, doc := range packageDocs(t) {
		if n := len(doc.List); n > maxPackageDocLines {
			t.Errorf("%s: the package doc has %d lines, more than %d; move the long arguments to a page under docs/ and link it", path, n, maxPackageDocLines)
		}
	}
}

// TestREADMERuleCount checks the number of rules the README says the
// conformance suite has against the suite itself.
func TestREADMERuleCount(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(\d+)\s+named\s+rules`).FindAllSubmatch(readme, -1)
	if len(m) == 0 {
		t.Fatal("README.md states no count of the conformance suite's named rules")
	}
	want := len(conformance.Cases())
	for _, sm := range m {
		if n, _ := strconv.Atoi(string(sm[1])); n != want {
			t.Errorf("README.md says %d named rules; the conformance suite has %d", n, want)
		}
	}
}

// docPath matches a repository path under docs/ as docs and pages write it:
// in a Markdown link target or in plain text.
var docPath = regexp.MustCompile(`(?:^|[\s(\[\x60"'])((?:\.\./)*docs/[\w./-]*\w)`)

// TestDocLinksResolve checks that every docs/ path named in README.md, in a
// package doc or in a page under docs/ is a file of the repository. Paths
// in README.md and package docs are relative to the repository's root;
// Markdown links in pages under docs/ are relative to the page.
func TestDocLinksResolve(t *testing.T) {
	check := func(where, text string) {
		t.Helper()
		for _, m := range docPath.FindAllStringSubmatch(text, -1) {
			if _, err := os.Stat(filepath.FromSlash(m[1])); err != nil {
				t.Errorf("%s names %s, which does not exist", where, m[1])
			}
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	check("README.md", string(readme))
	for path, doc := range packageDocs(t) {
		check(path+" (package doc)", doc.Text())
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)`)
	err = filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		page, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range link.FindAllStringSubmatch(string(page), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), filepath.FromSlash(target))); err != nil {
				t.Errorf("%s links %s, which does not exist", path, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// walkLibraryFiles calls fn with every non-test Go file of the repository
// (every module's), skipping hidden and testdata directories.
func walkLibraryFiles(fn func(path string) error) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return fn(path)
	})
}
