package bnb_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/x448/float16"
)

// componentBytes returns the flat bytes of a uint8 host component.
func componentBytes(t *testing.T, c implicitarray.Component) []byte {
	t.Helper()
	return tensors.MustCopyFlatData[uint8](c.Tensor())
}

// TestQuantize4bitMatchesBitsandbytes: on every committed quantize_4bit case (ragged sizes, rows
// shorter than a block, a zero block, block sizes 64 and 128, bfloat16 and float16 inputs, with
// and without compress_statistics), the packed codes, the absmax (or their codes, the nested
// absmax and the offset) are bitsandbytes' bytes, and the materialized values and decoded absmax
// are bitsandbytes' values (its pure-PyTorch dequantization) bit for bit.
func TestQuantize4bitMatchesBitsandbytes(t *testing.T) {
	idx := loadIndex(t)
	backend := testutil.Backend(t)
	for _, c := range idx.QuantizeCase {
		t.Run(c.ID, func(t *testing.T) {
			x := readTensor(t, c.Input, c.Shape)
			a, err := bnb.Quantize4bit(x, c.BlockSize, c.CompressStatistics)
			if err != nil {
				t.Fatalf("%+v", err)
			}
			n := x.Shape().Size()
			if got := a.Format(); got.BlockSize != c.BlockSize || got.DoubleQuant != c.CompressStatistics {
				t.Fatalf("format %s", got)
			}
			packed := componentBytes(t, a.Packed())
			if want := readBytes(t, c.Outputs["packed"]); !bytes.Equal(packed[:(n+1)/2], want) {
				t.Errorf("packed codes differ from bitsandbytes' (%d bytes)", len(want))
			}
			if !c.CompressStatistics {
				absmax := tensors.MustCopyFlatData[float32](a.Absmax().Tensor())
				equalFloats(t, "absmax", testutil.Converted[float64](absmax), readFloats(t, c.Outputs["absmax"]))
			} else {
				if got, want := componentBytes(t, a.Absmax()), readBytes(t, c.Outputs["absmax"]); !bytes.Equal(got, want) {
					t.Errorf("absmax codes differ from bitsandbytes'")
				}
				nested := tensors.MustCopyFlatData[float32](a.NestedAbsmax().Tensor())
				equalFloats(t, "nested absmax", testutil.Converted[float64](nested), readFloats(t, c.Outputs["nested_absmax"]))
				offset := tensors.MustCopyFlatData[float32](a.Offset().Tensor())
				equalFloats(t, "offset", testutil.Converted[float64](offset), readFloats(t, c.Outputs["offset"]))
				equalFloats(t, "nested quant map", testutil.Converted[float64](mapSlice(nf4.DynamicMap())), readFloats(t, c.Outputs["nested_quant_map"]))
				decoded := graph.MustExecOnce(backend, func(codes, nested, offset *graph.Node) *graph.Node {
					return lowering.NestedScales{Codes: codes, Absmax: nested, Offset: offset, Map: nf4.DynamicMap(),
						BlockSize: nf4.NestedBlockSize}.Decode()
				}, a.Absmax().Tensor(), a.NestedAbsmax().Tensor(), a.Offset().Tensor())
				equalFloats(t, "decoded absmax", testutil.Float64s(t, decoded), readFloats(t, c.Outputs["absmax_decoded"]))
			}
			var got []float64
			if runtime.IsGo(backend) && c.DType != "float32" {
				// The pure-Go backend truncates float32 to bfloat16 and has no float16 conversion:
				// materialize in float32 and round to the dtype on the host (to nearest even, as torch).
				dense := testutil.Materialize(t, a.WithDType(dtypes.Float32))
				got = roundTo(t, testutil.Float64s(t, dense), c.DType)
			} else {
				dense := testutil.Materialize(t, a)
				if dense.DType() != dtypeOf(t, c.DType) {
					t.Errorf("materialized dtype %s, want %s", dense.DType(), c.DType)
				}
				got = testutil.Float64s(t, dense)
			}
			ref, ok := c.Outputs["dequantized"]
			if !ok {
				ref = c.Outputs["dequantized_rows"] // the first rows of a big case
			}
			want := readFloats(t, ref)
			equalFloats(t, "dequantized", got[:len(want)], want)
		})
	}
}

// TestNF4CodebookIsBitsandbytes: bitsandbytes' NF4 quant_map is nf4.Codebook.
func TestNF4CodebookIsBitsandbytes(t *testing.T) {
	cb := nf4.Codebook()
	equalFloats(t, "quant_map", testutil.Converted[float64](cb[:]), readFloats(t, loadIndex(t).NF4QuantMap))
}

func mapSlice(m [256]float32) []float32 { return m[:] }

// equalFloats fails unless got and want hold the same values bit for bit (as float64 widenings).
func equalFloats(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	bad, first := 0, -1
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ, first at %d: %v, want %v", what, bad, len(want), first, got[first], want[first])
	}
}

// roundTo rounds float32 values to bfloat16 or float16, to nearest even.
func roundTo(t *testing.T, values []float64, dtype string) []float64 {
	t.Helper()
	out := make([]float64, len(values))
	for i, v := range values {
		switch dtype {
		case "bfloat16":
			b := math.Float32bits(float32(v))
			b += 0x7fff + (b>>16)&1
			out[i] = float64(math.Float32frombits(b &^ 0xffff))
		case "float16":
			out[i] = float64(float16.Fromfloat32(float32(v)).Float32())
		default:
			t.Fatalf("dtype %q", dtype)
		}
	}
	return out
}
