package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMethodsGenerated: each format package's methods.go is what methodsSource generates from
// Base's methods.
func TestMethodsGenerated(t *testing.T) {
	for _, pkg := range methodsPackages {
		got, err := os.ReadFile(filepath.Join("..", "..", "..", "..", pkg, "methods.go"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := methodsSource(pkg, filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s/methods.go is not what qarray_methods generates: run go generate ./%s", pkg, pkg)
		}
	}
}

// TestForwardedMethods: a method of *Base is forwarded with its documentation, parameters (a
// variadic one spread) and results, and imports only the packages its signature uses; unexported
// methods, functions and other receivers are not.
func TestForwardedMethods(t *testing.T) {
	dir := t.TempDir()
	src := `package qarray

import (
	"strings"
	iox "io"
)

type Base struct{}

// Scale multiplies.
// Second line.
func (b *Base) Scale(f float64, xs ...int) (float64, error) { return 0, nil }

// Reset resets.
func (b *Base) Reset(r iox.Reader) {}

// Name names.
func (b Base) Name() string { return "" }

func (b *Base) hidden() {}

// Join joins.
func Join(b *Base, s *strings.Builder) {}
`
	if err := os.WriteFile(filepath.Join(dir, "base.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := methodsSource("onebit", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package onebit\n",
		"\tiox \"io\"\n",
		"// Scale multiplies.\n// Second line.\nfunc (a *Array) Scale(f float64, xs ...int) (float64, error) { return a.Base.Scale(f, xs...) }\n",
		"// Reset resets.\nfunc (a *Array) Reset(r iox.Reader) { a.Base.Reset(r) }\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("generated source lacks %q:\n%s", want, got)
		}
	}
	for _, absent := range []string{"Name", "hidden", "Join", "strings", "WithStrategy"} {
		if strings.Contains(string(got), absent) {
			t.Errorf("generated source has %q:\n%s", absent, got)
		}
	}
}
