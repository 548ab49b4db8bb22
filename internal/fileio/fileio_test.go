package fileio_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/fileio"
)

type file struct {
	size   int64
	closer fileio.Closer
}

func closerOf(f *file) *fileio.Closer { return &f.closer }

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.bin")
	if err := os.WriteFile(path, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := fileio.Open("test.Open", path, func(r io.ReaderAt, size int64) (*file, error) { return &file{size: size}, nil }, closerOf)
	if err != nil || f.size != 5 {
		t.Fatalf("Open: %v, %+v", f, err)
	}
	if err := f.closer.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := f.closer.Close(); err != nil {
		t.Errorf("second Close: %v, want a no-op", err)
	}
	bad := errors.New("bad header")
	_, err = fileio.Open("test.Open", path, func(io.ReaderAt, int64) (*file, error) { return nil, bad }, closerOf)
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "test.Open(") {
		t.Errorf("Open of a bad file: %v", err)
	}
	if _, err := fileio.Open("test.Open", path+".none", nil, closerOf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v", err)
	}
	if _, err := fileio.Open("test.Open", filepath.Dir(path), nil, closerOf); err == nil || !strings.Contains(err.Error(), "accepted: a regular file") {
		t.Errorf("Open of a directory: %v", err)
	}
}

func TestLookup(t *testing.T) {
	notFound := errors.New("not found")
	byName := map[string]int{"a": 1}
	if v, err := fileio.Lookup(byName, notFound, "test.Read", "a"); v != 1 || err != nil {
		t.Errorf("Lookup(a) = %d, %v", v, err)
	}
	if _, err := fileio.Lookup(byName, notFound, "test.Read", "b"); !errors.Is(err, notFound) || err.Error() != `test.Read: tensor "b": not found` {
		t.Errorf("Lookup(b): %v", err)
	}
}

func TestElements(t *testing.T) {
	const big = int64(1) << 40
	for _, tc := range []struct {
		dims  []int64
		limit uint64
		want  uint64
		ok    bool
	}{
		{nil, 0, 1, false},
		{nil, 1, 1, true},
		{[]int64{2, 3}, 6, 6, true},
		{[]int64{2, 3}, 5, 0, false},
		{[]int64{2, 0}, 0, 0, true},
		{[]int64{100, 0}, 0, 0, true},
		{[]int64{0, 2}, 0, 0, true},
		{[]int64{big, 0}, 0, 0, true},       // as the reference safetensors library accepts it
		{[]int64{big, big, 0}, 0, 0, false}, // the non-zero dimensions overflow
		{[]int64{1 << 32, 1 << 32}, 1 << 62, 0, false},
		{[]int64{-1, 0}, 10, 0, false},
	} {
		got, ok := fileio.Elements(tc.dims, tc.limit)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("Elements(%v, %d) = %d, %v; want %d, %v", tc.dims, tc.limit, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCheckInt(t *testing.T) {
	if err := fileio.CheckInt("k", uint64(5), 1, 5); err != nil {
		t.Errorf("5 in [1, 5]: %v", err)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fileio.CheckInt("llama.block_count", uint64(1)<<63, 1, fileio.MaxCount), "llama.block_count = 9223372036854775808; accepted: 1 to 2147483647"},
		{fileio.CheckInt("num_hidden_layers", 0, 1, 10), "num_hidden_layers = 0; accepted: 1 to 10"},
		{fileio.CheckInt("r", int8(-3), 1, 10), "r = -3; accepted: 1 to 10"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("error %v, want %q", tc.err, tc.want)
		}
	}
}

func TestCheckFloatAbove(t *testing.T) {
	if err := fileio.CheckFloatAbove("eps", 1e-6, 0); err != nil {
		t.Errorf("1e-6 above 0: %v", err)
	}
	for _, v := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := fileio.CheckFloatAbove("layer_norm_eps", v, 0)
		if want := fmt.Sprintf("layer_norm_eps = %g; accepted: a finite number above 0", v); err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	// 0 as float32, or subnormal there (flushed to zero by XLA's CPU backend); the smallest normal
	// float32 passes.
	for _, v := range []float64{1e-300, 1e-40, 0x1p-127} {
		err := fileio.CheckFloatAbove("eps", v, 0)
		if want := fmt.Sprintf("eps = %g, 0 as float32", v); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %v, want one starting %q", err, want)
		}
	}
	if err := fileio.CheckFloatAbove("eps", 0x1p-126, 0); err != nil {
		t.Errorf("2^-126 above 0: %v", err)
	}
}

func TestDecodeHalfFloats(t *testing.T) {
	// Little-endian 1, -2, +Inf and the smallest subnormal of each format.
	tests := []struct {
		name   string
		decode func(src []byte, dst []float32)
		src    []byte
		want   []float32
	}{
		{"F16", fileio.DecodeF16, []byte{0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C, 0x01, 0x00},
			[]float32{1, -2, float32(math.Inf(1)), 0x1p-24}},
		{"BF16", fileio.DecodeBF16, []byte{0x80, 0x3F, 0x00, 0xC0, 0x80, 0x7F, 0x01, 0x00},
			[]float32{1, -2, float32(math.Inf(1)), math.Float32frombits(0x00010000)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]float32, len(tc.want))
			tc.decode(tc.src, got)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(tc.want[i]) {
					t.Errorf("value %d = %g, want %g", i, got[i], tc.want[i])
				}
			}
		})
	}
}
