package onebit_test

import (
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/onebit"
)

// randomValues returns n values valid for the layout, from a seeded source.
func randomValues(r *rand.Rand, l onebit.Packing, n int) []int8 {
	v := make([]int8, n)
	for i := range v {
		if l == onebit.OneBit {
			v[i] = int8(2*r.Intn(2) - 1)
		} else {
			v[i] = int8(r.Intn(3) - 1)
		}
	}
	return v
}

func TestPackBytes(t *testing.T) {
	// References: the layout of eformer's pack_weights_1bit (EFORMER_SPEC 3.1), computed by hand;
	// the 4x4 case was also produced by eformer 0.0.101 itself.
	cases := []struct {
		name   string
		layout onebit.Packing
		values []int8
		dims   []int
		want   []uint8
	}{
		{"column of 8 (Q=2)", onebit.TwoBit, []int8{1, 0, -1, 1, 0, 0, -1, 1}, []int{8}, []uint8{0x12, 0x99}},
		{"all zeros", onebit.TwoBit, []int8{0, 0, 0, 0, 0, 0, 0, 0}, []int{4, 2}, []uint8{0x55, 0x55}},
		{"all +1", onebit.TwoBit, []int8{1, 1, 1, 1}, []int{4}, []uint8{0xAA}},
		{"all -1", onebit.TwoBit, []int8{-1, -1, -1, -1}, []int{4}, []uint8{0x00}},
		{"eformer 4x4", onebit.TwoBit, []int8{-1, 0, 1, 1, 1, -1, 0, 0, 0, 0, 1, -1, 1, 1, -1, 0}, []int{4, 4},
			[]uint8{152, 145, 38, 70}},
		{"bits column of 8", onebit.OneBit, []int8{1, -1, -1, 1, 1, 1, -1, 1}, []int{8}, []uint8{0xB9}},
		{"bits 16 rows (E=2)", onebit.OneBit, []int8{1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1},
			[]int{16}, []uint8{0x01, 0x80}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := onebit.PackValues(c.layout, c.values, c.dims...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("PackValues = %#x, want %#x", got, c.want)
			}
			back, err := onebit.UnpackValues(c.layout, got, c.dims...)
			if err != nil || !slices.Equal(back, c.values) {
				t.Fatalf("UnpackValues = %v, %v; want %v", back, err, c.values)
			}
			// The same bytes through the Array types.
			tensor := tensors.FromFlatDataAndDimensions(c.values, c.dims...)
			var packed *tensors.Tensor
			if c.layout == onebit.OneBit {
				packed = onebit.MustPackBits(tensor, nil).Packed().Tensor()
			} else {
				packed = onebit.MustPack(tensor, nil).Packed().Tensor()
			}
			if got := tensors.MustCopyFlatData[uint8](packed); !slices.Equal(got, c.want) {
				t.Fatalf("Pack bytes = %#x, want %#x", got, c.want)
			}
		})
	}
}

func TestPackRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, l := range []onebit.Packing{onebit.TwoBit, onebit.OneBit} {
		for _, dims := range [][]int{{8}, {16, 3}, {8, 2, 5}, {32, 1}, {24, 7}} {
			values := randomValues(r, l, testutil.Size(dims...))
			packed, err := onebit.PackValues(l, values, dims...)
			if err != nil {
				t.Fatalf("%s %v: %v", l, dims, err)
			}
			if want := testutil.Size(dims...) / l.ValuesPerByte(); len(packed) != want {
				t.Fatalf("%s %v: %d bytes, want %d", l, dims, len(packed), want)
			}
			back, _ := onebit.UnpackValues(l, packed, dims...)
			if !slices.Equal(back, values) {
				t.Fatalf("%s %v: round trip differs", l, dims)
			}
			// Host Values() of the packed array.
			tensor := tensors.FromFlatDataAndDimensions(values, dims...)
			var got *tensors.Tensor
			if l == onebit.OneBit {
				got, err = onebit.MustPackBits(tensor, nil).Values()
			} else {
				got, err = onebit.MustPack(tensor, nil).Values()
			}
			if err != nil || !slices.Equal(tensors.MustCopyFlatData[int8](got), values) {
				t.Fatalf("%s %v: Values() differs (%v)", l, dims, err)
			}
		}
	}
}

func FuzzPackRoundTrip(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, uint8(1), false)
	f.Add([]byte{9, 9, 9, 9, 200, 100, 50, 25, 1, 2, 3, 4, 5, 6, 7, 8}, uint8(2), true)
	f.Fuzz(func(t *testing.T, raw []byte, cols uint8, bits bool) {
		l := onebit.TwoBit
		if bits {
			l = onebit.OneBit
		}
		c := int(cols%5) + 1
		rows := len(raw) / c / l.ValuesPerByte() * l.ValuesPerByte()
		if rows == 0 {
			return
		}
		values := make([]int8, rows*c)
		for i := range values {
			if l == onebit.OneBit {
				values[i] = int8(2*(raw[i]%2)) - 1
			} else {
				values[i] = int8(raw[i]%3) - 1
			}
		}
		packed, err := onebit.PackValues(l, values, rows, c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := onebit.UnpackValues(l, packed, rows, c)
		if err != nil || !slices.Equal(back, values) {
			t.Fatalf("round trip of %v: %v, %v", values, back, err)
		}
	})
}

func TestBadInput(t *testing.T) {
	f32 := func(v []float32, dims ...int) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(v, dims...) }
	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		{"first dim not multiple of 4", func() error { _, err := onebit.Pack(f32(make([]float32, 6), 6), nil); return err },
			[]string{"[6]", "multiple of 4"}},
		{"bits first dim not multiple of 8", func() error {
			_, err := onebit.QuantizeBinaryBits(f32(make([]float32, 8), 4, 2), nil)
			return err
		}, []string{"[4 2]", "multiple of 8"}},
		{"value outside", func() error {
			_, err := onebit.Pack(f32([]float32{0, 1, -1, 0, 1, 0.5, 0, 0}, 4, 2), nil)
			return err
		}, []string{"0.5", "[2 1]", "flat 5"}},
		{"zero in bits", func() error {
			_, err := onebit.PackBits(f32([]float32{1, 1, 1, 0, 1, 1, 1, 1}, 8), nil)
			return err
		}, []string{"value 0", "[3]"}},
		{"NaN", func() error {
			_, err := onebit.QuantizeTernary(f32([]float32{0, 1, float32(nan()), 0}, 4), nil)
			return err
		}, []string{"NaN", "[2]"}},
		{"+Inf ternary", func() error {
			_, err := onebit.QuantizeTernary(f32([]float32{0, 1, float32(math.Inf(1)), 0}, 4), nil)
			return err
		}, []string{"+Inf", "[2]", "finite"}},
		{"-Inf binary", func() error {
			_, err := onebit.QuantizeBinary(f32([]float32{0, 1, 0, float32(math.Inf(-1))}, 4), nil)
			return err
		}, []string{"-Inf", "[3]", "finite"}},
		{"+Inf binary bits", func() error {
			_, err := onebit.QuantizeBinaryBits(f32([]float32{0, 1, 0, 0, 0, 0, 0, float32(math.Inf(1))}, 8), nil)
			return err
		}, []string{"+Inf", "finite"}},
		{"empty binary", func() error { _, err := onebit.QuantizeBinary(f32(nil, 4, 0), nil); return err }, []string{"[4 0]", "empty"}},
		{"empty ternary", func() error { _, err := onebit.QuantizeTernary(f32(nil, 4, 0), nil); return err }, []string{"[4 0]", "empty"}},
		{"empty pack", func() error { _, err := onebit.Pack(f32(nil, 4, 0, 3), nil); return err }, []string{"[4 0 3]", "empty"}},
		{"empty pack bits", func() error { _, err := onebit.PackBits(f32(nil, 8, 0), nil); return err }, []string{"[8 0]", "empty"}},
		{"empty first dim", func() error { _, err := onebit.Pack(f32(nil, 0, 2), nil); return err }, []string{"[0 2]", "empty"}},
		{"PackValues empty", func() error { _, err := onebit.PackValues(onebit.TwoBit, nil, 4, 0); return err },
			[]string{"empty"}},
		{"scalar", func() error { _, err := onebit.Pack(tensors.FromValue(float32(1)), nil); return err }, []string{"scalar"}},
		{"Pack with scale", func() error {
			_, err := onebit.Pack(f32(make([]float32, 4), 4), &onebit.Options{Scale: true})
			return err
		},
			[]string{"Options.Scale"}},
		{"BitNet binary", func() error {
			_, err := onebit.QuantizeBinary(f32(make([]float32, 4), 4), &onebit.Options{BitNet: true})
			return err
		}, []string{"ternary"}},
		{"scale axis out of range", func() error {
			_, err := onebit.QuantizeBinary(f32(make([]float32, 4), 4), &onebit.Options{Scale: true, ScaleAxes: []int{1}})
			return err
		}, []string{"axis 1 out of range"}},
		{"scaled int dtype", func() error {
			_, err := onebit.QuantizeBinary(f32(make([]float32, 4), 4), &onebit.Options{Scale: true, DType: dtypes.Int8})
			return err
		}, []string{"float dtype"}},
		{"PackValues size", func() error { _, err := onebit.PackValues(onebit.TwoBit, []int8{1, 1}, 4); return err },
			[]string{"2 values"}},
		{"UnpackValues size", func() error { _, err := onebit.UnpackValues(onebit.OneBit, []uint8{1, 1}, 8); return err },
			[]string{"2 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
