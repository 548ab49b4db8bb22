package trainctx_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/trainctx"
)

// TestCloneModel clones a context holding a model variable and an optimizer variable: the copy has
// the model's values, under the same scope, and not the optimizer's, and carries its own seed.
func TestCloneModel(t *testing.T) {
	ctx := trainctx.New(1)
	ctx.In("model").In("dense").VariableWithValue("weights", tensors.FromValue([]float32{1.5, -2}))
	ctx.In("optimizer").VariableWithValue("step", tensors.FromValue(int64(7)))

	out, err := trainctx.CloneModel(ctx, 42)
	if err != nil {
		t.Fatalf("CloneModel: %v", err)
	}
	w := out.In("model").In("dense").GetVariable("weights")
	if w == nil {
		t.Fatal("the clone has no /model/dense/weights")
	}
	if got := tensors.MustCopyFlatData[float32](w.MustValue()); len(got) != 2 || got[0] != 1.5 || got[1] != -2 {
		t.Errorf("the clone's weights = %v; want [1.5 -2]", got)
	}
	if out.In("optimizer").GetVariable("step") != nil {
		t.Error("the clone has the optimizer's variable")
	}
	if seed := context.GetParamOr(out, context.ParamInitialSeed, int64(0)); seed != 42 {
		t.Errorf("the clone's seed = %d; want 42", seed)
	}
}
