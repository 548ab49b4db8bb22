package onebit_test

import (
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/onebit"
)

func nan() float64 { return math.NaN() }

func values(t *testing.T, v interface {
	Values() (*tensors.Tensor, error)
}) []int8 {
	t.Helper()
	out, err := v.Values()
	if err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[int8](out)
}

func TestQuantizeRules(t *testing.T) {
	// Ternary ties: x = 4×(3, -3), 4×(1, -1), 4×0 has mean 0, variance 80/20 = 4, std 2, so the
	// threshold is exactly 1: ±3 → ±1, ±1 (ties) → 0, 0 → 0.
	tieX := []float32{3, -3, 1, -1, 0, 3, -3, 1, -1, 0, 3, -3, 1, -1, 0, 3, -3, 1, -1, 0}
	tieWant := []int8{1, -1, 0, 0, 0, 1, -1, 0, 0, 0, 1, -1, 0, 0, 0, 1, -1, 0, 0, 0}
	cases := []struct {
		name  string
		quant func(*tensors.Tensor) (interface {
			Values() (*tensors.Tensor, error)
		}, error)
		x    []float32
		dims []int
		want []int8
	}{
		{"binary zeros to +1", func(x *tensors.Tensor) (interface {
			Values() (*tensors.Tensor, error)
		}, error) {
			return onebit.QuantizeBinary(x, nil)
		}, []float32{0, -0.5, 2, float32(math.Copysign(0, -1)), -1e-30, 1e-30, -7, 0}, []int{8},
			[]int8{1, -1, 1, 1, -1, 1, -1, 1}},
		{"binary bits", func(x *tensors.Tensor) (interface {
			Values() (*tensors.Tensor, error)
		}, error) {
			return onebit.QuantizeBinaryBits(x, nil)
		}, []float32{0, -0.5, 2, 3, -1e-30, 1e-30, -7, 0}, []int{8}, []int8{1, -1, 1, 1, -1, 1, -1, 1}},
		{"ternary ties at ±t", func(x *tensors.Tensor) (interface {
			Values() (*tensors.Tensor, error)
		}, error) {
			return onebit.QuantizeTernary(x, nil)
		}, tieX, []int{4, 5}, tieWant},
		// BitNet: mean|x| = (0.5+1.5+3+0+0.2+0.8+2+0)/8 = 1, so values = clip(round(x), -1, 1), half to even.
		{"ternary bitnet", func(x *tensors.Tensor) (interface {
			Values() (*tensors.Tensor, error)
		}, error) {
			return onebit.QuantizeTernary(x, &onebit.Options{BitNet: true})
		}, []float32{0.5, -1.5, 3, 0, -0.2, 0.8, -2, 0}, []int{8}, []int8{0, -1, 1, 0, 0, 1, -1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := c.quant(tensors.FromFlatDataAndDimensions(c.x, c.dims...))
			if err != nil {
				t.Fatal(err)
			}
			if got := values(t, a); !slices.Equal(got, c.want) {
				t.Fatalf("values %v, want %v", got, c.want)
			}
		})
	}
}

func TestQuantizeDefaultsAndScale(t *testing.T) {
	x := tensors.FromValue([][]float32{{1, -2}, {-3, 4}, {0, 0}, {2, -2}})
	b := onebit.MustQuantizeBinary(x, nil)
	if b.DType() != dtypes.Int8 || b.IsScaled() {
		t.Fatalf("binary default: dtype %s scaled %v; want Int8 unscaled (eformer)", b.DType(), b.IsScaled())
	}
	if p := onebit.MustPack(tensors.FromValue([]float32{1, 0, -1, 0}), nil); p.DType() != dtypes.Float32 {
		t.Fatalf("Pack dtype %s, want the input's Float32", p.DType())
	}
	s := onebit.MustQuantizeBinary(x, &onebit.Options{Scale: true, ScaleAxes: []int{0}})
	if s.DType() != dtypes.Float32 || !slices.Equal(s.ScaleAxes(), []int{0}) {
		t.Fatalf("scaled: dtype %s axes %v", s.DType(), s.ScaleAxes())
	}
	comp, ok := s.Scale()
	if !ok {
		t.Fatal("no scale")
	}
	// mean |x| over axis 0: column 0 (1+3+0+2)/4 = 1.5, column 1 (2+4+0+2)/4 = 2.
	if got := comp.Tensor().Value().([][]float32); !slices.Equal(got[0], []float32{1.5, 2}) {
		t.Fatalf("scale %v, want [[1.5 2]]", got)
	}
	bn := onebit.MustQuantizeTernary(x, &onebit.Options{BitNet: true})
	comp, _ = bn.Scale()
	// mean |x| over all: (1+2+3+4+0+0+2+2)/8 = 1.75.
	if got := comp.Tensor().Value().([][]float32); got[0][0] != 1.75 || !slices.Equal(bn.ScaleAxes(), []int{0, 1}) {
		t.Fatalf("bitnet scale %v axes %v", got, bn.ScaleAxes())
	}
	// x/1.75 = .57 -1.14 / -1.71 2.29 / 0 0 / 1.14 -1.14 → round: 1 -1 / -2→-1 2→1 / 0 0 / 1 -1.
	if got := values(t, bn); !slices.Equal(got, []int8{1, -1, -1, 1, 0, 0, 1, -1}) {
		t.Fatalf("bitnet values %v", got)
	}
	if n := s.Bytes(); n != 2+4*2 {
		t.Fatalf("Bytes %d, want 2 packed + 8 scale", n)
	}
}
