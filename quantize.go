package quanta

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
	"github.com/quanta-ml/quanta/ste"
)

// Quantize quantizes a host tensor as cfg says and returns the implicit array, with cfg's product
// strategy: an *nf4.Array (blocks along the last axis; absmax double-quantized with
// cfg.DoubleQuant), an *int8.Array (one scale per slice along
// the last axis) or an *onebit.Array (binary: sign, zeros to +1; ternary: ±1 beyond 0.5·std, else
// 0; scaled if cfg asks).
func Quantize(t *tensors.Tensor, cfg Config) (implicitarray.Array, error) {
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
		if q, err = nf4.Quantize(t, cfg.EffectiveBlockSize()); err == nil && cfg.DoubleQuant {
			single := q
			q, err = nf4.DoubleQuantize(single)
			single.Delete()
		}
		if err == nil {
			a = q.WithStrategy(cfg.Strategy)
		}
	case Int8:
		var q *qint8.Array
		if q, err = qint8.Quantize(t); err == nil {
			a = q.WithStrategy(cfg.Strategy)
		}
	case Binary, Ternary:
		var q *onebit.Array
		if cfg.Type == Binary {
			q, err = onebit.QuantizeBinary(t, onebitOptions(cfg))
		} else {
			q, err = onebit.QuantizeTernary(t, onebitOptions(cfg))
		}
		if err == nil {
			a = q.WithStrategy(cfg.Strategy)
		}
	}
	if err != nil {
		return nil, errors.WithMessagef(err, "quanta.Quantize(%s, %s)", t.Shape(), cfg.Type)
	}
	return a, nil
}

// MustQuantize is Quantize that panics on error.
func MustQuantize(t *tensors.Tensor, cfg Config) implicitarray.Array {
	a, err := Quantize(t, cfg)
	if err != nil {
		panic(err)
	}
	return a
}

// Simulate returns the fake-quantized tensor: t quantized as cfg says, then materialized on
// backend (in t's dtype for NF4 and Int8, and for scaled binary/ternary; unscaled binary and
// ternary materialize as int8 values -1, 0, +1).
func Simulate(backend backends.Backend, t *tensors.Tensor, cfg Config) (*tensors.Tensor, error) {
	a, err := Quantize(t, cfg)
	if err != nil {
		return nil, err
	}
	defer a.(interface{ Delete() }).Delete()
	return implicitarray.MaterializeOnHost(backend, a)
}

// MustSimulate is Simulate that panics on error.
func MustSimulate(backend backends.Backend, t *tensors.Tensor, cfg Config) *tensors.Tensor {
	out, err := Simulate(backend, t, cfg)
	if err != nil {
		panic(err)
	}
	return out
}

// QuantizeNode is Quantize inside a graph: it returns the graph-side implicit array. It panics on
// an invalid cfg or input, as GoMLX's graph functions do.
func QuantizeNode(x *graph.Node, cfg Config) implicitarray.Array {
	if err := cfg.Validate(); err != nil {
		panic(errors.WithMessagef(err, "quanta.QuantizeNode(%s)", describeNode(x)))
	}
	if x == nil {
		panic(errors.New("quanta.QuantizeNode: nil node"))
	}
	switch cfg.Type {
	case NF4:
		q := nf4.QuantizeNode(x, cfg.EffectiveBlockSize())
		if cfg.DoubleQuant {
			q = nf4.DoubleQuantizeNode(q)
		}
		return q.WithStrategy(cfg.Strategy)
	case Int8:
		return qint8.QuantizeNode(x).WithStrategy(cfg.Strategy)
	case Binary:
		return onebit.QuantizeBinaryNode(x, onebitOptions(cfg)).WithStrategy(cfg.Strategy)
	}
	return onebit.QuantizeTernaryNode(x, onebitOptions(cfg)).WithStrategy(cfg.Strategy)
}

// StraightThrough returns the quantized-then-materialized value of x (in x's dtype) with the
// gradient of the identity: the straight-through estimator, for quantization-aware training. The
// forward value equals Materialize(QuantizeNode(x, cfg)) for every Type, binary and ternary with
// their sign and threshold rules; their values are computed without packing, so their first
// dimension need not be a multiple of 4. cfg.BlockSize matters only for NF4, cfg.Strategy not at
// all.
func StraightThrough(x *graph.Node, cfg Config) *graph.Node {
	if err := cfg.Validate(); err != nil {
		panic(errors.WithMessagef(err, "quanta.StraightThrough(%s)", describeNode(x)))
	}
	return ste.Apply(x, func(x *graph.Node) *graph.Node {
		switch cfg.Type {
		case Binary:
			return onebit.FakeQuantizeBinary(x, onebitOptions(cfg))
		case Ternary:
			return onebit.FakeQuantizeTernary(x, onebitOptions(cfg))
		}
		return implicitarray.Materialize(QuantizeNode(x, cfg))
	})
}

func onebitOptions(cfg Config) *onebit.Options {
	switch {
	case cfg.BitNet:
		return &onebit.Options{BitNet: true, Scale: true, ScaleAxes: []int{0}}
	case cfg.Scaled:
		return &onebit.Options{Scale: true, ScaleAxes: []int{0}}
	}
	return nil
}

func describeNode(x *graph.Node) string {
	if x == nil {
		return "nil"
	}
	return x.Shape().String()
}
