package refdata

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name  []string
		dtype string
		dims  []int
	}{
		{[]string{"smollm2", "eval_ids.npy"}, "<i4", []int{1024}},
		{[]string{"smollm2", "nll_f32.npy"}, "<f8", []int{1023}},
		{[]string{"minilm", "emb_f32.npy"}, "<f4", []int{32, 384}},
	} {
		a, err := Load(tc.name...)
		if errors.Is(err, ErrMissing) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if a.DType != tc.dtype || len(a.Dims) != len(tc.dims) || len(a.Values) != product(tc.dims) {
			t.Errorf("%v: %s %v with %d values; want %s %v", tc.name, a.DType, a.Dims, len(a.Values), tc.dtype, tc.dims)
		}
	}
	if _, err := Ints("smollm2", "nll_f32.npy"); err == nil || errors.Is(err, ErrMissing) {
		t.Errorf("Ints of a float64 file: %v, want a dtype error", err)
	}
	if _, err := Load("no", "such.npy"); !errors.Is(err, ErrMissing) {
		t.Errorf("Load of a missing file: %v, want ErrMissing", err)
	}
	var v map[string]any
	if err := JSON(&v, "smollm2", "index.json"); err != nil || v["format"] != 1.0 {
		t.Errorf("JSON(index.json): %v, format %v", err, v["format"])
	}
}

func product(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// TestMissingNamesEnv: a reference directory that cannot be found, from a working directory
// outside any module or inside another one, is an error naming QUANTA_REFERENCE, the variable to
// set; it named only the go.mod it looked for.
func TestMissingNamesEnv(t *testing.T) {
	t.Setenv(EnvDir, "")
	outside := t.TempDir()
	t.Chdir(outside)
	if _, err := Path("minilm", "sentences.json"); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), EnvDir) {
		t.Errorf("outside a module: Path = %v; want ErrMissing naming %s", err, EnvDir)
	}
	if err := os.WriteFile(filepath.Join(outside, "go.mod"), []byte("module other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Path("minilm", "sentences.json"); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), EnvDir) {
		t.Errorf("in another module: Path = %v; want ErrMissing naming %s", err, EnvDir)
	}
}
