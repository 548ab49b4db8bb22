package int8_test

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/runtime"
)

// TestConvertIsFused proves from XLA's optimized program that the MulReduce strategy never builds a
// float copy of the weight: the int8 -> float convert sits inside the fusion that consumes it.
// GoMLX exposes no optimized HLO, so the test reruns itself with XLA_FLAGS=--xla_dump_to and reads
// the dump. It also logs what XLA CPU does with DecodeDot.
func TestConvertIsFused(t *testing.T) {
	backend := testutil.Backend(t)
	if testutil.InHLOChild() {
		rng := rand.New(rand.NewSource(1))
		// Pinned strategies: with kernels, Auto gives these one-row products to a custom call.
		reduce := qint8.MustQuantize(testutil.NormalTensor(rng, 48, 64)).WithStrategy(lowering.MulReduce) // (N, K): bk,nk->bn
		scaled := qint8.MustQuantize(testutil.NormalTensor(rng, 64, 40)).WithStrategy(lowering.DecodeDot) // (K, N): x @ w
		implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
			return implicitarray.Einsum("bk,nk->bn", x, w).(*graph.Node)
		}).MustCall1(testutil.NormalTensor(rng, 1, 64), reduce)
		implicitarray.MustNewExec(backend, func(x *graph.Node, w *qint8.Array) *graph.Node {
			return implicitarray.MatMul(x, w).(*graph.Node)
		}).MustCall1(testutil.NormalTensor(rng, 1, 64), scaled)
		return
	}
	if !runtime.IsXLA(backend) {
		t.Skip("reads XLA's optimized HLO dump; the backend is not XLA")
	}
	dir, _ := testutil.DumpHLO(t)
	files, _ := filepath.Glob(filepath.Join(dir, "*after_optimizations.txt"))
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		at := strings.Index(text, "\nENTRY")
		if at < 0 {
			t.Fatalf("%s has no ENTRY computation", f)
		}
		entry := text[at:]
		switch {
		case strings.Contains(text, "s8[48,64]"):
			checked++
			if strings.Contains(entry, "f32[48,64]") || !strings.Contains(text, "convert(") {
				t.Errorf("reduce lowering: a float copy of the weight is a top-level value:\n%s", entry)
			}
		case strings.Contains(text, "s8[64,40]"):
			// Recorded, not asserted: XLA CPU does not fuse a convert into a dot, which is why
			// the SlicedSum strategy exists.
			checked++
			t.Logf("scaled (dot) lowering: XLA CPU fuses the convert into the dot: %v",
				!strings.Contains(entry, "f32[64,40]"))
		}
	}
	if checked != 2 {
		t.Fatalf("found %d of the 2 programs in the dump (%d files)", checked, len(files))
	}
}
