package main

import (
	"flag"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// runExperiment runs the experiment s sets on the Fashion-MNIST files, skipping the test where they
// are missing, and writes its outputs to a fresh temporary folder; it returns the results and the
// folder.
func runExperiment(t *testing.T, s settings) (*results, string) {
	t.Helper()
	s.dataDir = assets.FashionMNISTDir
	if _, err := os.Stat(filepath.Join(s.dataDir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST missing (%v): Debian's dataset-fashion-mnist installs it", err)
	}
	r, err := experiment(testutil.Backend(t), s, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := r.write(out); err != nil {
		t.Fatal(err)
	}
	return r, out
}

// TestTiny runs the experiment on 4096 training and 1000 test images with 64 hidden units, two
// float epochs and one QAT epoch, for int8 and scaled binary: the float model learns, int8 PTQ
// stays close to it, the outputs are written.
func TestTiny(t *testing.T) {
	s := settings{trainLimit: 4096, testLimit: 1000, hidden: 64, epochs: 2, qatEpochs: 1, batch: 128,
		learningRate: 1e-3, evalsPerEpoch: 2, seed: 1, formats: []format{formats[1], formats[6]}}
	r, out := runExperiment(t, s)
	t.Log("\n" + r.table())
	if r.FloatAcc < 0.7 {
		t.Errorf("float accuracy %.4f after two epochs on 4096 images; expected above 0.7", r.FloatAcc)
	}
	if len(r.Rows) != 2 || r.Rows[0].Format != "int8" || r.Rows[1].Format != "binary_scaled" {
		t.Fatalf("rows %+v", r.Rows)
	}
	if d := r.FloatAcc - r.Rows[0].PTQ; d > 0.02 || d < -0.02 {
		t.Errorf("int8 PTQ accuracy %.4f, float %.4f: more than 2 points apart", r.Rows[0].PTQ, r.FloatAcc)
	}
	for _, rw := range r.Rows {
		if len(rw.Curve) != 1+s.qatEpochs*s.evalsPerEpoch || rw.Curve[0].Accuracy != rw.PTQ || len(rw.QATLoss) != 1 || rw.QAT <= 0.1 {
			t.Errorf("%s: curve %v, losses %v, QAT %.4f", rw.Format, rw.Curve, rw.QATLoss, rw.QAT)
		}
	}
	// 784·64 + 64·64 + 64·10 float32 weights: int8 codes are a quarter, plus a scale per input row.
	if want := int64(784*64+64*64+64*10) + 4*(784+64+64); r.Rows[0].KernelBytes != want {
		t.Errorf("int8 kernels: %d bytes, want %d", r.Rows[0].KernelBytes, want)
	}
	checkPNG(t, filepath.Join(out, "fashion.png"))
}

// checkPNG checks that the file at path is a PNG image.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("%s: %v", filepath.Base(path), err)
	}
}

// TestEpochsOutOfRange: a negative epoch count is an error naming its flag, rather than a run of
// no epoch reporting results for "-1 float epochs".
func TestEpochsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		flag *int
		want string
	}{{flagEpochs, "-epochs -1"}, {flagQAT, "-qat-epochs -1"}} {
		saved := *c.flag
		*c.flag = -1
		err := checkFlags()
		*c.flag = saved
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkFlags() = %v; want an error naming %q", err, c.want)
		}
	}
	if err := checkFlags(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestArguments: an argument is an error naming it, before anything runs; it was ignored, and
// with it every flag after it (flag parsing stops at the first argument).
func TestArguments(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) }

// TestJSONEnvironment: fashion.json names what its figures and wall time ran on,
// runtime.Environment's plugin, kernels and XLA_FLAGS, not only the backend's description.
func TestJSONEnvironment(t *testing.T) {
	_, out := runExperiment(t, settings{trainLimit: 256, testLimit: 100, hidden: 8, batch: 128, learningRate: 1e-3, evalsPerEpoch: 1, seed: 1})
	testutil.JSONEnvironment(t, filepath.Join(out, "fashion.json"))
}

// TestOutputDir: an -out that cannot be a directory is an error naming -out, checked before the
// training (it was reported once the whole experiment had run, as "fashion: fashion: ...").
func TestOutputDir(t *testing.T) {
	file := testutil.FileInTemp(t)
	if err := outputDir(filepath.Join(file, "out")); err == nil || !strings.Contains(err.Error(), "-out "+file) {
		t.Errorf("outputDir under a file = %v; want an error naming -out", err)
	}
	if err := (&results{}).write(file); err == nil || strings.Contains(err.Error(), "fashion:") {
		t.Errorf("write to a file = %v; want an error without the command's prefix, which main adds", err)
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := outputDir(dir); err != nil {
		t.Errorf("outputDir(%s) = %v", dir, err)
	}
}

// TestQuickWithEpochs: -quick sets the epoch counts; one given with it is an error naming both,
// not silently replaced by 1. (One case: the flag package remembers which flags a parse set.)
func TestQuickWithEpochs(t *testing.T) {
	quick, qat := *flagQuick, *flagQAT
	defer func() {
		*flagQuick, *flagQAT = quick, qat
		_ = flag.CommandLine.Parse(nil)
	}()
	if err := flag.CommandLine.Parse([]string{"-quick", "-qat-epochs", "3"}); err != nil {
		t.Fatal(err)
	}
	if err := checkFlags(); err == nil || !strings.Contains(err.Error(), "-quick with -qat-epochs") {
		t.Errorf("-quick -qat-epochs 3: checkFlags() = %v; want an error naming both", err)
	}
}

// TestOutputsReplacedWhole: fashion.json, fashion.md and fashion.png are each replaced whole (a
// complete new file renamed over the old one), not rewritten in place, where an interrupted run
// left a truncated file.
func TestOutputsReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	r := &results{Backend: "test", FloatAcc: 0.8, FloatCurve: []point{{0.5, 0.7}, {1, 0.8}},
		Rows: []row{{Format: "int8", PTQ: 0.79, QAT: 0.8, Curve: []point{{1, 0.79}, {2, 0.8}}}}}
	var paths []string
	for _, name := range []string{"fashion.json", "fashion.md", "fashion.png"} {
		paths = append(paths, filepath.Join(dir, name))
	}
	testutil.ReplacedWhole(t, func() error { return r.write(dir) }, paths...)
	checkPNG(t, paths[2])
}

// TestFormatsListed: a format listed twice in -formats is an error naming it (it was trained and
// reported twice), as is an unknown one, before anything runs.
func TestFormatsListed(t *testing.T) {
	saved := *flagFormats
	defer func() { *flagFormats = saved }()
	for list, want := range map[string]string{
		"int8,nf4,int8":  `-formats: "int8" listed twice`,
		"nf4, fp32,fp32": `-formats: "fp32" listed twice`,
		"nf4,bogus":      `-formats: unknown format "bogus"`,
	} {
		*flagFormats = list
		if err := checkFlags(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-formats %s: checkFlags() = %v; want an error naming %q", list, err, want)
		}
	}
	*flagFormats = "int8, binary_scaled"
	if got, err := parseFormats(*flagFormats); err != nil || len(got) != 2 || got[1].name != "binary_scaled" {
		t.Errorf("parseFormats(%q) = %v, %v", *flagFormats, got, err)
	}
}

// TestPlotErrorPrefix: an error drawing a curve names the curve without the command's prefix,
// which main adds (it printed "fashion: fashion: plotting ...").
func TestPlotErrorPrefix(t *testing.T) {
	r := &results{FloatCurve: []point{{0.5, 0.7}, {1, math.NaN()}}}
	_, err := r.plot()
	if err == nil || !strings.Contains(err.Error(), "plotting float32") || strings.Contains(err.Error(), "fashion:") {
		t.Errorf("plot() of a NaN accuracy = %v; want an error naming the curve, without the command's prefix", err)
	}
}

// TestReferenceColumnsOutside: run outside the repository, the reference harness's accuracies are
// not found; the table then lacks its reference column, and stderr says so, naming
// QUANTA_REFERENCE, the variable that locates them (they were dropped without a word); the log
// says "no reference" (it gave "reference 0.0000 / 0.0000", figures the reference never had).
func TestReferenceColumnsOutside(t *testing.T) {
	dir := assets.FashionMNISTDir
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST missing (%v): Debian's dataset-fashion-mnist installs it", err)
	}
	backend := testutil.Backend(t)
	t.Setenv(refdata.EnvDir, "")
	t.Chdir(t.TempDir())
	s := settings{dataDir: dir, trainLimit: 256, testLimit: 100, hidden: 8, batch: 128, learningRate: 1e-3, evalsPerEpoch: 1, seed: 1,
		formats: []format{formats[1]}}
	var r *results
	var log strings.Builder
	out := testutil.CaptureStderr(t, func() (err error) {
		r, err = experiment(backend, s, &log)
		return err
	})
	if strings.Contains(log.String(), "reference 0.0000") {
		t.Errorf("the log gives a reference accuracy of 0 where there is none:\n%s", log.String())
	}
	if len(r.Rows) != 1 || r.Rows[0].RefPTQ != 0 {
		t.Errorf("rows %+v; want one without a reference", r.Rows)
	}
	if n := strings.Count(out, refdata.EnvDir); n != 1 || !strings.HasPrefix(out, "fashion: ") {
		t.Errorf("stderr %q names %s %d times; want one line", out, refdata.EnvDir, n)
	}
}
