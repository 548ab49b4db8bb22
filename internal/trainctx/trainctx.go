// Package trainctx holds the GoMLX contexts that the examples comparing post-training
// quantization with quantization-aware training (fashion, qat) train in: one seeded context that
// the float training fills, and copies of its model variables from which each quantization type
// starts.
package trainctx

import (
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
)

// New returns a context with a seeded initialization (seed) whose variables may be reused: the
// quantization-aware training and the evaluation graphs read the variables the float training
// created.
func New(seed uint64) *context.Context {
	ctx := context.New().Checked(false)
	ctx.SetParam(context.ParamInitialSeed, int64(seed))
	return ctx
}

// CloneModel copies the variables under ctx's scope "model" (not the optimizer's state) into a new
// context made by New(seed).
func CloneModel(ctx *context.Context, seed uint64) (*context.Context, error) {
	out := New(seed)
	for v := range ctx.In("model").IterVariablesInScope() {
		if _, err := v.CloneToContext(out); err != nil {
			return nil, errors.WithMessagef(err, "copying %s", v.ScopeAndName())
		}
	}
	return out, nil
}
