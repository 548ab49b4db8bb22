// Package modelbase holds what the model packages (llama, minilm) share beyond package models'
// API: the default projection of a model whose Projection is nil, and the variables of a load in
// progress, each placed on the backend as soon as it is converted and all released when a later
// tensor fails, so that a loader writes the context only once everything is converted; kernels
// of fused projections are concatenated there before they are converted.
package modelbase

import (
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/hostdata"
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
	table   models.TableFunc
	backend backends.Backend
	list    []models.Variable
	fusions map[string]*fusion // by part scope
}

// fusion is a group of projections stored as one: the parts' kernels wait in held until all
// have arrived.
type fusion struct {
	scope string
	parts []string
	held  []*tensors.Tensor
	names []string
}

// NewVars returns an empty collection whose kernels go through kernel (nil: models.DenseKernel),
// whose embedding tables go through table (nil: models.DenseTableVariables), and whose values are
// placed on backend (nil: left local; see models.Place).
func NewVars(kernel models.KernelFunc, table models.TableFunc, backend backends.Backend) *Vars {
	if kernel == nil {
		kernel = models.DenseKernel
	}
	if table == nil {
		table = models.DenseTableVariables
	}
	return &Vars{kernel: kernel, table: table, backend: backend, fusions: map[string]*fusion{}}
}

// Fuse makes the kernels of the projections at the scopes parts one kernel at scope, theirs
// concatenated along the output axis in the order of parts: AddKernel holds each part until the
// last arrives, then passes the concatenation through the KernelFunc.
func (v *Vars) Fuse(scope string, parts []string) {
	f := &fusion{scope: scope, parts: parts, held: make([]*tensors.Tensor, len(parts)), names: make([]string, len(parts))}
	for _, p := range parts {
		v.fusions[p] = f
	}
}

// AddTable passes the embedding table [rows, dim] at scope through the TableFunc and collects and
// places the variables it returns. An error of the TableFunc, after which the table is finalized,
// names it as "table of <what>".
func (v *Vars) AddTable(scope string, table *tensors.Tensor, what string) error {
	tv, err := v.table(scope, table)
	if err != nil {
		_ = table.FinalizeAll()
		return errors.WithMessage(err, "table of "+what)
	}
	v.list = append(v.list, tv...)
	return models.Place(v.backend, tv)
}

// Add collects the variable and places its value on the backend.
func (v *Vars) Add(scope, name string, value *tensors.Tensor) error {
	vr := models.Variable{Scope: scope, Name: name, Value: value}
	v.list = append(v.list, vr)
	return models.Place(v.backend, []models.Variable{vr})
}

// AddKernel passes the float kernel (inDim, outDim) of the projection at scope through the
// KernelFunc and collects and places the variables it returns. An error of the KernelFunc, after
// which the kernel is finalized, names the kernel as "kernel of <what>".
//
// A kernel that is a part of a fusion (Fuse) is held instead; the part that completes the fusion
// passes the concatenated kernel, named by all the parts' names.
func (v *Vars) AddKernel(scope string, kernel *tensors.Tensor, what string) error {
	if f := v.fusions[scope]; f != nil {
		i := slices.Index(f.parts, scope)
		f.held[i], f.names[i] = kernel, what
		if slices.Contains(f.held, nil) {
			return nil
		}
		fused, err := hostdata.ConcatenateColumns(f.held)
		for j, t := range f.held {
			_ = t.FinalizeAll()
			f.held[j] = nil
		}
		if err != nil {
			return errors.WithMessagef(err, "fusing %s", strings.Join(f.names, ", "))
		}
		scope, kernel, what = f.scope, fused, strings.Join(f.names, ", ")
	}
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

// Release finalizes the collected values and the kernels held for a fusion, for a load that
// failed.
func (v *Vars) Release() {
	models.Release(v.list)
	for _, f := range v.fusions {
		for j, t := range f.held {
			if t != nil {
				_ = t.FinalizeAll()
				f.held[j] = nil
			}
		}
	}
}
