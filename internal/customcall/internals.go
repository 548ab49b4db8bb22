package customcall

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/pkg/errors"
)

// The module versions whose internals this package was written against and verified with.
const (
	GoMLXModule  = "github.com/gomlx/gomlx"
	GoMLXVersion = "v0.26.0"
	GoXLAModule  = "github.com/gomlx/go-xla"
	GoXLAVersion = "v0.1.4"
)

// customCallOpName is how go-xla writes the op type of a custom call.
const customCallOpName = "stablehlo.custom_call"

// internals holds what Rewrite reaches by reflection, found once.
type internals struct {
	outputOps  reflect.StructField // graph.Node.outputOps []backends.Op
	nodeValue  reflect.StructField // xla.Node.value *stablehlo.Value
	valueFn    reflect.StructField // stablehlo.Value.fn *stablehlo.Function
	customCall reflect.Value       // the stablehlo.Statement.OpType value of a custom call
	constant   reflect.Value       // ... and of a constant
}

var found struct {
	once sync.Once
	in   *internals
	err  error
}

// inspected returns the internals, or why they are not the expected ones (wrapping
// ErrUnsupported).
func inspected() (*internals, error) {
	found.once.Do(func() {
		found.in, found.err = inspect(moduleVersions())
		if found.err != nil {
			found.err = errors.Wrapf(ErrUnsupported, "customcall: %v", found.err)
		}
	})
	return found.in, found.err
}

// moduleVersions returns the versions of the GoMLX and go-xla modules built into the binary
// (replacements included); a module is absent when the binary has no build information.
func moduleVersions() map[string]string {
	versions := map[string]string{}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return versions
	}
	for _, dep := range info.Deps {
		if dep.Path != GoMLXModule && dep.Path != GoXLAModule {
			continue
		}
		if dep.Replace != nil {
			versions[dep.Path] = dep.Replace.Version + " (replaced by " + dep.Replace.Path + ")"
		} else {
			versions[dep.Path] = dep.Version
		}
	}
	return versions
}

// inspect checks the module versions and finds the fields and op types Rewrite uses.
func inspect(versions map[string]string) (*internals, error) {
	for module, want := range map[string]string{GoMLXModule: GoMLXVersion, GoXLAModule: GoXLAVersion} {
		if got, ok := versions[module]; ok && got != want {
			return nil, errors.Errorf("built with %s %s; this package reaches into %s %s's internals: re-verify "+
				"them (see its doc) and update GoMLXVersion/GoXLAVersion", module, got, module, want)
		}
	}
	in := &internals{}
	var err error
	if in.outputOps, err = fieldOf(reflect.TypeFor[graph.Node](), "outputOps", reflect.TypeFor[[]backends.Op]()); err != nil {
		return nil, err
	}
	if in.nodeValue, err = fieldOf(reflect.TypeFor[xla.Node](), "value", reflect.TypeFor[*stablehlo.Value]()); err != nil {
		return nil, err
	}
	if in.valueFn, err = fieldOf(reflect.TypeFor[stablehlo.Value](), "fn", reflect.TypeFor[*stablehlo.Function]()); err != nil {
		return nil, err
	}
	opType, ok := reflect.TypeFor[stablehlo.Statement]().FieldByName("OpType")
	if !ok || opType.Type.Kind() != reflect.Int {
		return nil, errors.New("stablehlo.Statement has no integer field OpType")
	}
	for _, want := range []struct {
		name string
		dst  *reflect.Value
	}{{customCallOpName, &in.customCall}, {"stablehlo.constant", &in.constant}} {
		if *want.dst, err = opTypeNamed(opType.Type, want.name); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// fieldOf returns the field of struct type t, checking its type.
func fieldOf(t reflect.Type, name string, want reflect.Type) (reflect.StructField, error) {
	f, ok := t.FieldByName(name)
	if !ok {
		return f, errors.Errorf("%s has no field %q", t, name)
	}
	if f.Type != want {
		return f, errors.Errorf("%s.%s has type %s, want %s", t, name, f.Type, want)
	}
	return f, nil
}

// opTypeNamed returns the value of the op-type enum t that go-xla writes as name.
func opTypeNamed(t reflect.Type, name string) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	for i := int64(0); i < 1024; i++ {
		v.SetInt(i)
		s, ok := v.Interface().(interface{ ToStableHLO() string })
		if !ok {
			return v, errors.Errorf("%s has no ToStableHLO method", t)
		}
		if s.ToStableHLO() == name {
			return v, nil
		}
		if fmt.Sprint(v.Interface()) == "Last" {
			break
		}
	}
	return v, errors.Errorf("no value of %s is written %q", t, name)
}

// readField returns the field f (of type T, checked by inspect) of the struct *ptr.
func readField[T any, S any](ptr *S, f reflect.StructField) T {
	return *(*T)(unsafe.Add(unsafe.Pointer(ptr), f.Offset))
}

// valueOf returns the go-xla value behind a GoMLX node of the XLA backend.
func (in *internals) valueOf(node *graph.Node) (*stablehlo.Value, error) {
	ops := readField[[]backends.Op](node, in.outputOps)
	if len(ops) != 1 {
		return nil, errors.Errorf("node has %d outputs; accepted: 1", len(ops))
	}
	xn, ok := ops[0].(*xla.Node)
	if !ok || xn == nil {
		return nil, errors.Wrapf(ErrUnsupported, "node's backend op is %T; accepted: *xla.Node", ops[0])
	}
	return readField[*stablehlo.Value](xn, in.nodeValue), nil
}

// functionOf returns the go-xla function that owns value.
func (in *internals) functionOf(value *stablehlo.Value) *stablehlo.Function {
	return readField[*stablehlo.Function](value, in.valueFn)
}
