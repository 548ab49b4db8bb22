// Package modelbase holds what the model packages (llama, minilm) share beyond package models'
// API: the default projection of a model whose Projection is nil, and the variables of a load in
// progress, each placed on the backend as soon as it is converted and all released when a later
// tensor fails, so that a loader writes the context only once everything is converted.
package modelbase

import (
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/models"
)

// Project computes the linear layer called name through p, or through models.Dense when p is
// nil.
func Project(p models.Projection, ctx *context.Context, name string, x *graph.Node, outDim int, useBias bool) *graph.Node {
	if p == nil {
		return models.Dense(ctx, name, x, outDim, useBias)
	}
	return p(ctx, name, x, outDim, useBias)
}

// Vars collects the variables of a load in progress.
type Vars struct {
	kernel  models.KernelFunc
	backend backends.Backend
	list    []models.Variable
}

// NewVars returns an empty collection whose kernels go through kernel (nil: models.DenseKernel)
// and whose values are placed on backend (nil: left local; see models.Place).
func NewVars(kernel models.KernelFunc, backend backends.Backend) *Vars {
	if kernel == nil {
		kernel = models.DenseKernel
	}
	return &Vars{kernel: kernel, backend: backend}
}

// Add collects the variable and places its value on the backend.
func (v *Vars) Add(scope, name string, value *tensors.Tensor) error {
	vr := models.Variable{Scope: scope, Name: name, Value: value}
	v.list = append(v.list, vr)
	return models.Place(v.backend, []models.Variable{vr})
}

// Keep collects the variable without placing it, for a value the loader still reads on the host
// and places itself.
func (v *Vars) Keep(scope, name string, value *tensors.Tensor) {
	v.list = append(v.list, models.Variable{Scope: scope, Name: name, Value: value})
}

// AddKernel passes the float kernel (inDim, outDim) of the projection at scope through the
// KernelFunc and collects and places the variables it returns. An error of the KernelFunc, after
// which the kernel is finalized, names the kernel as "kernel of <what>".
func (v *Vars) AddKernel(scope string, kernel *tensors.Tensor, what string) error {
	kv, err := v.kernel(scope, kernel)
	if err != nil {
		_ = kernel.FinalizeAll()
		return errors.WithMessage(err, "kernel of "+what)
	}
	v.list = append(v.list, kv...)
	return models.Place(v.backend, kv)
}

// Store stores the collected variables in ctx (models.Store).
func (v *Vars) Store(ctx *context.Context) error { return models.Store(ctx, v.list) }

// Release finalizes the collected values, for a load that failed.
func (v *Vars) Release() { models.Release(v.list) }
