package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestHiddenOutOfRange: a width below 1 is an error naming -hidden, not a shape error from deep
// inside GoMLX's first training step.
func TestHiddenOutOfRange(t *testing.T) {
	for _, hidden := range []int{0, -1} {
		saved := *flagHidden
		*flagHidden = hidden
		err := checkFlags()
		*flagHidden = saved
		if err == nil || !strings.Contains(err.Error(), "-hidden") {
			t.Errorf("-hidden %d: checkFlags() = %v; want an error naming -hidden", hidden, err)
		}
	}
}

// TestHiddenNotPackable: binary and ternary need a width that is a multiple of 4 (their kernels
// pack 4 input rows a byte); the flag check says so naming -hidden before training, not after the
// float training when the conversion of the first quantized kernel fails.
func TestHiddenNotPackable(t *testing.T) {
	savedHidden, savedTypes, savedQuick := *flagHidden, *flagTypes, *flagQuick
	defer func() { *flagHidden, *flagTypes, *flagQuick = savedHidden, savedTypes, savedQuick }()
	*flagHidden, *flagTypes, *flagQuick = 6, "binary", true
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), "-hidden") {
		t.Errorf("-hidden 6 -types binary: checkFlags() = %v; want an error naming -hidden", err)
	}
}

// TestPlotAnyExtension: -plot is a PNG file whatever its name; a name without an extension (or
// with another one) was an "unsupported format" error after the whole run, leaving an empty file
// at the path (truncating one that was there).
func TestPlotAnyExtension(t *testing.T) {
	curves := []curve{{name: "float", points: []point{{0, 0.3}, {10, 0.9}}}}
	for _, name := range []string{"curves", "curves.txt", "curves.png"} {
		path := filepath.Join(t.TempDir(), name)
		if err := plotCurves(path, curves, 10); err != nil {
			t.Errorf("plotCurves(%q): %v", name, err)
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: not a PNG: %v", name, err)
		}
		f.Close()
	}
}

// TestArguments: an argument is an error naming it, before anything runs; it was ignored, and
// with it every flag after it (flag parsing stops at the first argument).
func TestArguments(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) }

// TestPlotChecked: a -plot that cannot be written is an error naming -plot before the training,
// not after it.
func TestPlotChecked(t *testing.T) {
	quick, types := *flagQuick, *flagTypes
	defer func() { *flagQuick, *flagTypes = quick, types }()
	*flagQuick, *flagTypes = true, "int8"
	testutil.OutputsChecked(t, checkFlags, map[string]*string{"-plot": flagPlot})
}

// TestUnknownType: an unknown name in -types is an error naming -types.
func TestUnknownType(t *testing.T) {
	saved := *flagTypes
	defer func() { *flagTypes = saved }()
	*flagTypes = "nf4,bogus"
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), `-types: quanta: unknown quantization type "bogus"`) {
		t.Errorf("checkFlags() = %v; want an error naming -types and \"bogus\"", err)
	}
}

// TestPlotReplacedWhole: -plot is replaced whole (a complete new file renamed over the old one),
// not rewritten in place, where an interrupted run left a truncated file.
func TestPlotReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curves.png")
	curves := []curve{{name: "float", points: []point{{0, 0.3}, {10, 0.9}}}}
	testutil.ReplacedWhole(t, func() error { return plotCurves(path, curves, 10) }, path)
}

// TestTypeListedTwice: a type listed twice in -types (under any spelling ParseType accepts) is an
// error naming it before anything runs; it was trained and reported twice. (-plot under a file
// fails the run early had the list been accepted.)
func TestTypeListedTwice(t *testing.T) {
	file := testutil.FileInTemp(t)
	types, plot := *flagTypes, *flagPlot
	defer func() { *flagTypes, *flagPlot = types, plot }()
	*flagPlot = filepath.Join(file, "curves.png")
	for list, want := range map[string]string{"nf4,int8,nf4": `-types: "nf4" listed twice`, "int8, INT8": `-types: "INT8" listed twice`} {
		*flagTypes = list
		if err := checkFlags(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-types %s: checkFlags() = %v; want an error naming %q", list, err, want)
		}
	}
}
