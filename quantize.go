package quanta

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/lowering"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/ste"
)

// Quantize quantizes a host tensor as cfg says and returns the implicit array: an *nf4.Array
// (block-wise along the last axis, cfg's block size), an *int8.Array (one scale per slice along the
// last axis, eformer's default) or an *onebit.Array (eformer's binary or ternary rule, scaled if
// cfg asks). With cfg.Simulate it returns instead the materialized, fake-quantized
// *tensors.Tensor, computed on the process-wide backend (runtime.Backend), as eformer's
// simulate=True. The returned value is an implicitarray.Array or a *tensors.Tensor.
func Quantize(t *tensors.Tensor, cfg Config) (implicitarray.Value, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, errors.New("quanta.Quantize: nil tensor")
	}
	var a implicitarray.Array
	var err error
	switch cfg.Type {
	case NF4:
		var q *nf4.Array
		if q, err = nf4.Quantize(t, cfg.EffectiveBlockSize()); err == nil {
			a = withKernel(q, cfg)
		}
	case Int8:
		var q *qint8.Array
		if q, err = qint8.Quantize(t); err == nil {
			a = withKernel(q, cfg)
		}
	case Binary, Ternary:
		var q *onebit.Array
		if cfg.Type == Binary {
			q, err = onebit.QuantizeBinary(t, onebitOptions(cfg)...)
		} else {
			q, err = onebit.QuantizeTernary(t, onebitOptions(cfg)...)
		}
		if err == nil {
			a = withKernel(q, cfg)
		}
	}
	if err != nil {
		return nil, errors.WithMessagef(err, "quanta.Quantize(%s, %s)", t.Shape(), cfg.Type)
	}
	if !cfg.Simulate {
		return a, nil
	}
	backend, err := runtime.Backend()
	if err != nil {
		return nil, err
	}
	return implicitarray.MaterializeOnHost(backend, a)
}

// MustQuantize is Quantize that panics on error.
func MustQuantize(t *tensors.Tensor, cfg Config) implicitarray.Value {
	v, err := Quantize(t, cfg)
	if err != nil {
		panic(err)
	}
	return v
}

// QuantizeNode is Quantize inside a graph: it returns the graph-side implicit array, or with
// cfg.Simulate its materialized dense node. It panics on an invalid cfg or input, as GoMLX's
// graph functions do.
func QuantizeNode(x *graph.Node, cfg Config) implicitarray.Value {
	if err := cfg.Validate(); err != nil {
		panic(errors.WithMessagef(err, "quanta.QuantizeNode(%s)", describeNode(x)))
	}
	if x == nil {
		panic(errors.New("quanta.QuantizeNode: nil node"))
	}
	var a implicitarray.Array
	switch cfg.Type {
	case NF4:
		a = withKernel(nf4.QuantizeNode(x, cfg.EffectiveBlockSize()), cfg)
	case Int8:
		a = withKernel(qint8.QuantizeNode(x), cfg)
	case Binary:
		a = withKernel(onebit.QuantizeBinaryNode(x, onebitOptions(cfg)...), cfg)
	case Ternary:
		a = withKernel(onebit.QuantizeTernaryNode(x, onebitOptions(cfg)...), cfg)
	}
	if cfg.Simulate {
		return implicitarray.Materialize(a)
	}
	return a
}

// StraightThrough returns the quantized-then-materialized value of x (in x's dtype) with the
// gradient of the identity: the straight-through estimator, for quantization-aware training. The
// forward value equals Materialize(QuantizeNode(x, cfg)) for every Type — binary and ternary
// included, with their sign / threshold rules (eformer's straight_through skips those rules for
// them and truncates w+1 instead; we don't). Binary and ternary values are computed without
// packing, so unlike Quantize their first dimension need not be a multiple of 4. cfg.Simulate is
// irrelevant here; cfg.BlockSize matters only for NF4.
func StraightThrough(x *graph.Node, cfg Config) *graph.Node {
	cfg.Simulate = false
	if err := cfg.Validate(); err != nil {
		panic(errors.WithMessagef(err, "quanta.StraightThrough(%s)", describeNode(x)))
	}
	return ste.Apply(x, func(x *graph.Node) *graph.Node {
		switch cfg.Type {
		case Binary:
			return onebit.FakeQuantizeBinary(x, onebitOptions(cfg)...)
		case Ternary:
			return onebit.FakeQuantizeTernary(x, onebitOptions(cfg)...)
		}
		return implicitarray.Materialize(QuantizeNode(x, cfg))
	})
}

func onebitOptions(cfg Config) []onebit.Option {
	switch {
	case cfg.BitNet:
		return []onebit.Option{onebit.BitNet(), onebit.WithScale(0)}
	case cfg.Scaled:
		return []onebit.Option{onebit.WithScale(0)}
	}
	return nil
}

// withKernel applies cfg.UseKernel: Disabled selects each format's materialize-then-dot path.
func withKernel[A implicitarray.Array](a A, cfg Config) implicitarray.Array {
	if cfg.UseKernel != Disabled {
		return a
	}
	switch q := any(a).(type) {
	case *nf4.Array:
		return q.WithStrategy(lowering.Materialize)
	case *qint8.Array:
		return q.WithLowering(qint8.LoweringMaterialize)
	case *onebit.Array:
		return q.WithMatMulStrategy(onebit.MaterializeDot)
	}
	return a
}

func describeNode(x *graph.Node) string {
	if x == nil {
		return "nil"
	}
	return x.Shape().String()
}
