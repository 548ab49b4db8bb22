package ggml_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/ggml"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/implicitarray"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/ggufbuild"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestRead reads the tensors of a small GGUF file: a block tensor becomes an array of its type
// holding the file's bytes, whose values are gguf.Decode's; other types and names are errors.
func TestRead(t *testing.T) {
	w := ggml.MustQuantize(testutil.RandomTensor(11, 3, 256), gguf.TypeQ4_K)
	raw := testutil.TensorBytes(t, w.Blocks().Tensor())
	file := ggufbuild.Build(nil, []ggufbuild.Tensor{
		{Name: "w", Type: uint32(gguf.TypeQ4_K), Dims: []uint64{256, 3}, Data: raw},
		ggufbuild.F32Tensor("norm", []float32{1, 2}, 2),
		{Name: "q8_1", Type: uint32(gguf.TypeQ8_1), Dims: []uint64{32}, Data: make([]byte, 36)},
		{Name: "empty", Type: uint32(gguf.TypeQ4_K), Dims: []uint64{256, 0}},
	})
	f, err := gguf.Read(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ggml.Read(f, "w")
	if err != nil {
		t.Fatal(err)
	}
	if a.Type() != gguf.TypeQ4_K || !a.Shape().Equal(shapes.Make(dtypes.Float32, 3, 256)) || !bytes.Equal(testutil.TensorBytes(t, a.Blocks().Tensor()), raw) {
		t.Errorf("Read: %s, want Q4_K [3 256] holding the file's bytes", a)
	}
	want, err := f.ReadFloat32("w")
	if err != nil {
		t.Fatal(err)
	}
	testutil.SameBits(t, "Materialize", testutil.Float32s(t, testutil.Materialize(t, a)), want)
	for _, tc := range []struct {
		name string
		is   error
	}{{"norm", gguf.ErrUnsupported}, {"q8_1", gguf.ErrUnsupported}, {"missing", gguf.ErrNotFound}} {
		if _, err := ggml.Read(f, tc.name); !errors.Is(err, tc.is) {
			t.Errorf("Read(%q): %v; want an error wrapping %v", tc.name, err, tc.is)
		}
	}
	_, err = ggml.Read(f, "empty")
	testutil.WantError(t, err, "tensor empty Q4_K [256 0]: dimensions [0 256]; accepted: rank >= 1, every dimension positive")
}

// TestReadNonFiniteScale: a block whose half-precision scale is NaN or infinite (here the d of
// Q8_0's second block set to +Inf, 0x7C00) is an error wrapping gguf.ErrCorrupt naming the tensor,
// the block and the scale, as File.DecodeInto reports it, never an array whose products are NaN.
func TestReadNonFiniteScale(t *testing.T) {
	data := make([]byte, 68)
	data[35] = 0x7C
	file := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "w", Type: uint32(gguf.TypeQ8_0), Dims: []uint64{32, 2}, Data: data}})
	f, err := gguf.Read(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ggml.Read(f, "w")
	if !errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("Read: %v; want an error wrapping gguf.ErrCorrupt", err)
	}
	testutil.WantError(t, err, "tensor w Q8_0 [32 2]: Q8_0 block 1: scale d is +Inf")
}

// TestReadClosedOrCut: reading from a closed file is an error saying so (os.ErrClosed), not one
// wrapping gguf.ErrCorrupt, since the file is not malformed; a file cut after it was opened is
// corrupt.
func TestReadClosedOrCut(t *testing.T) {
	data := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "w", Type: uint32(gguf.TypeQ8_0), Dims: []uint64{32, 2}, Data: make([]byte, 68)}})
	if _, err := ggml.Read(ggufbuild.Closed(t, data), "w"); !errors.Is(err, os.ErrClosed) || errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("Read of a closed file: %v; want os.ErrClosed, not gguf.ErrCorrupt", err)
	}
	cut, err := gguf.Read(bytes.NewReader(data[:len(data)-40]), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ggml.Read(cut, "w"); !errors.Is(err, gguf.ErrCorrupt) {
		t.Errorf("Read of a file cut after it was opened: %v; want gguf.ErrCorrupt", err)
	}
}

// TestReadRealFiles reads one tensor of each block type of the real files of the assets and
// materializes it in the graph: ggml's values (gguf.Decode, whose digests over every tensor of
// these files gguf-py confirms).
func TestReadRealFiles(t *testing.T) {
	for _, tc := range []struct{ asset, tensor string }{
		{assets.SmolLM2, "blk.0.attn_q.weight"},     // Q4_1
		{assets.Gemma3, "blk.0.attn_output.weight"}, // Q4_K
		{assets.Gemma3, "blk.0.attn_q.weight"},      // Q5_0
		{assets.Gemma3, "blk.0.ffn_down.weight"},    // Q6_K
		{assets.Gemma3, "blk.0.attn_v.weight"},      // Q8_0
	} {
		t.Run(tc.tensor, func(t *testing.T) {
			f, err := gguf.Open(assets.Require(t, tc.asset))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			a, err := ggml.Read(f, tc.tensor)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Delete()
			want, err := f.ReadFloat32(tc.tensor)
			if err != nil {
				t.Fatal(err)
			}
			testutil.SameBits(t, a.String(), testutil.Float32s(t, testutil.Materialize(t, a)), want)
		})
	}
}

func TestConstructorErrors(t *testing.T) {
	nan := tensors.FromFlatDataAndDimensions(append(make([]float32, 31), float32(math.NaN())), 1, 32)
	g := graph.NewGraph(testutil.Backend(t), "errors")
	for _, tc := range []struct {
		name    string
		build   func() error
		wantErr string
	}{
		{"quantize/not a block type", func() error { _, err := ggml.Quantize(testutil.RandomTensor(1, 2, 32), gguf.TypeF16); return err },
			"type F16; accepted: a block type"},
		{"quantize/ints", func() error {
			_, err := ggml.Quantize(tensors.FromFlatDataAndDimensions(make([]int32, 32), 1, 32), gguf.TypeQ8_0)
			return err
		}, "dtype Int32; accepted: float32"},
		{"quantize/scalar", func() error { _, err := ggml.Quantize(tensors.FromValue(float32(1)), gguf.TypeQ8_0); return err },
			"accepted: rank >= 1"},
		{"quantize/partial block", func() error { _, err := ggml.Quantize(testutil.RandomTensor(1, 2, 128), gguf.TypeQ4_K); return err },
			"last dimension 128 is not a multiple of the Q4_K block size 256"},
		{"quantize/NaN", func() error { _, err := ggml.Quantize(nan, gguf.TypeQ4_0); return err }, "element 31 is NaN"},
		{"quantize/beyond float32", func() error {
			v := make([]float64, 64)
			v[40] = 1e39 // finite, but above float32's largest 3.4028234663852886e+38
			_, err := ggml.Quantize(tensors.FromFlatDataAndDimensions(v, 2, 32), gguf.TypeQ8_0)
			return err
		}, "element 40 is 1e+39, beyond float32's range"},
		{"from bytes/short", func() error { _, err := ggml.FromBytes(gguf.TypeQ4_0, []int{2, 32}, make([]byte, 35)); return err },
			"35 bytes for Q4_0 [2 32]; accepted: 36 bytes"},
		{"from bytes/huge dims", func() error {
			_, err := ggml.FromBytes(gguf.TypeQ4_0, []int{1 << 40, 1 << 40, 32}, make([]byte, 18))
			return err
		}, "has more elements than an int counts"},
		{"from bytes/zero dim", func() error { _, err := ggml.FromBytes(gguf.TypeQ4_0, []int{0, 32}, nil); return err },
			"every dimension positive"},
		{"new/wrong block bytes", func() error {
			_, err := ggml.New(implicitarray.NodeComponent(graph.Parameter(g, "b", shapes.Make(dtypes.Uint8, 2, 1, 20))), gguf.TypeQ4_0, dtypes.Float32)
			return err
		}, "accepted: uint8 (..., numBlocks, 18)"},
		{"new/int dtype", func() error {
			_, err := ggml.New(implicitarray.NodeComponent(graph.Parameter(g, "c", shapes.Make(dtypes.Uint8, 2, 1, 18))), gguf.TypeQ4_0, dtypes.Int32)
			return err
		}, "materialization dtype Int32; accepted: a float dtype"},
		{"new/not a block type", func() error {
			_, err := ggml.New(implicitarray.NodeComponent(graph.Parameter(g, "d", shapes.Make(dtypes.Uint8, 2, 1, 36))), gguf.TypeQ8_1, dtypes.Float32)
			return err
		}, "type Q8_1; accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) { testutil.WantError(t, tc.build(), tc.wantErr) })
	}
}

// TestBytesAfterDelete: Bytes counts the stored blocks (4 rows of 2 Q4_0 blocks of 18 bytes);
// after Delete it is implicitarray.ErrDeleted, as Delete documents, not a panic about a dtype.
func TestBytesAfterDelete(t *testing.T) {
	w := ggml.MustQuantize(testutil.RandomTensor(1, 4, 64), gguf.TypeQ4_0)
	if got := w.Bytes(); got != 4*2*18 {
		t.Errorf("Bytes() = %d, want %d", got, 4*2*18)
	}
	w.Delete()
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, implicitarray.ErrDeleted) {
			t.Errorf("Bytes() after Delete: %v; want a panic with implicitarray.ErrDeleted", err)
		}
	}()
	w.Bytes()
}

// TestBlocksShapeErrors: BlocksShape names itself, the type and the dims for no dimensions, for
// a type without blocks (F16's 2 bytes are an element, not a block), a last dimension of partial
// blocks and a negative dimension.
func TestBlocksShapeErrors(t *testing.T) {
	if got := ggml.BlocksShape(gguf.TypeQ4_K, 3, 512); !got.Equal(shapes.Make(dtypes.Uint8, 3, 2, 144)) {
		t.Errorf("BlocksShape(Q4_K, 3, 512) = %s, want (Uint8)[3 2 144]", got)
	}
	for _, tc := range []struct {
		typ  gguf.Type
		dims []int
		want string
	}{
		{gguf.TypeQ4_0, nil, "ggml.BlocksShape(Q4_0, []); accepted: a block type"},
		{gguf.TypeF16, []int{2, 32}, "ggml.BlocksShape(F16, [2 32]); accepted: a block type"},
		// Partial blocks would be dropped: (Uint8)[4 0 144] holds fewer elements than [4 100].
		{gguf.TypeQ4_K, []int{4, 100}, "ggml.BlocksShape(Q4_K, [4 100]): the last dimension 100 is not a multiple of the Q4_K block size 256"},
		{gguf.TypeQ4_0, []int{4, 48}, "ggml.BlocksShape(Q4_0, [4 48]): the last dimension 48 is not a multiple of the Q4_0 block size 32"},
		// A negative dimension is caught here, not deep inside GoMLX's shapes.Make.
		{gguf.TypeQ4_0, []int{-1, 32}, "ggml.BlocksShape(Q4_0, [-1 32]); accepted: dimensions >= 0"},
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				testutil.WantError(t, err, tc.want)
			}()
			ggml.BlocksShape(tc.typ, tc.dims...)
		}()
	}
}

// TestNew assembles an array from blocks in a graph: the same values as the host array.
func TestNew(t *testing.T) {
	w := ggml.MustQuantize(testutil.RandomTensor(12, 2, 64), gguf.TypeIQ4_NL)
	got := graph.MustExecOnce(testutil.Backend(t), func(blocks *graph.Node) *graph.Node {
		a, err := ggml.New(implicitarray.NodeComponent(blocks), gguf.TypeIQ4_NL, dtypes.Float32)
		if err != nil {
			panic(err)
		}
		return implicitarray.Materialize(a)
	}, w.Blocks().Tensor())
	testutil.SameBits(t, "New(...).Materialize", testutil.Float32s(t, got), testutil.Float32s(t, testutil.Materialize(t, w)))
}

// TestReadPastReaderContent: a tensor a gguf.File claims but its reader does not hold (gguf.Read
// was given a size larger than the content) is an error wrapping gguf.ErrCorrupt before its
// blocks are allocated.
func TestReadPastReaderContent(t *testing.T) {
	data := ggufbuild.Build(nil, []ggufbuild.Tensor{{Name: "big", Type: uint32(gguf.TypeQ8_0), Dims: []uint64{32, 1 << 26}}})
	f, err := gguf.Read(bytes.NewReader(data), math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	testutil.AllocatesAtMost(t, "ggml.Read", 1<<20, func() {
		if _, err := ggml.Read(f, "big"); !errors.Is(err, gguf.ErrCorrupt) {
			t.Errorf("ggml.Read of a tensor past the reader's content: %v; want an error wrapping gguf.ErrCorrupt", err)
		}
	})
}
