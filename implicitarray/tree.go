package implicitarray

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
)

// TreeDef describes a parameter tree (structs, pointers to structs, maps with ordered keys, slices
// and arrays) whose leaves are arrays: host tensors, graph nodes or implicit arrays. It keeps the
// implicit arrays' types and static metadata, so the tree can be rebuilt from its flat leaves on
// the other side of a graph boundary.
type TreeDef struct {
	root      *treeNode
	numLeaves int
}

type nodeKind int

const (
	leafKind nodeKind = iota
	arrayKind
	structKind
	pointerKind
	mapKind
	sliceKind
)

type treeNode struct {
	kind     nodeKind
	typ      reflect.Type
	shape    shapes.Shape    // leafKind
	template Array           // arrayKind: supplies type and metadata to WithComponents
	names    []string        // structKind: field names
	keys     []reflect.Value // mapKind: keys, sorted
	children []*treeNode
}

var (
	nodeType   = reflect.TypeFor[*graph.Node]()
	tensorType = reflect.TypeFor[*tensors.Tensor]()
	arrayType  = reflect.TypeFor[Array]()
	valueType  = reflect.TypeFor[Value]()
)

// Flatten returns the leaves of tree, with every implicit array (nested ones included) replaced by
// its components, and the TreeDef to rebuild it. Leaves are *tensors.Tensor or *graph.Node as the
// tree holds them; Go numbers and numeric slices become tensors, as graph.Exec accepts them.
// Anything else (a string, a nil, an unexported struct field) is an error naming its path.
func Flatten(tree any) ([]any, *TreeDef, error) { return flatten(tree, false) }

// FlattenWithImplicit is Flatten with implicit arrays kept whole as leaves.
func FlattenWithImplicit(tree any) ([]any, *TreeDef, error) { return flatten(tree, true) }

func flatten(tree any, keepArrays bool) (leaves []any, def *TreeDef, err error) {
	defer func() {
		// An Array's Components may panic (e.g. after Delete): report it as an error.
		if r := recover(); r != nil {
			rErr, ok := r.(error)
			if !ok {
				rErr = errors.New(fmt.Sprint(r))
			}
			leaves, def, err = nil, nil, errors.WithMessage(rErr, "implicitarray: flatten")
		}
	}()
	f := &flattener{keepArrays: keepArrays}
	root, err := f.walk(reflect.ValueOf(tree), "tree")
	if err != nil {
		return nil, nil, err
	}
	return f.leaves, &TreeDef{root: root, numLeaves: len(f.leaves)}, nil
}

type flattener struct {
	keepArrays bool
	leaves     []any
}

func (f *flattener) leaf(v any, shape shapes.Shape, typ reflect.Type) *treeNode {
	f.leaves = append(f.leaves, v)
	return &treeNode{kind: leafKind, typ: typ, shape: shape}
}

func (f *flattener) walk(v reflect.Value, path string) (*treeNode, error) {
	if !v.IsValid() || ((v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface ||
		v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.IsNil()) {
		return nil, errors.Errorf("implicitarray: nil leaf at %s; accepted leaves: *tensors.Tensor, *graph.Node, "+
			"an implicitarray.Array, or Go numbers", path)
	}
	if v.Kind() == reflect.Interface {
		return f.walk(v.Elem(), path)
	}
	switch x := v.Interface().(type) {
	case *tensors.Tensor:
		return f.leaf(x, x.Shape(), v.Type()), nil
	case *graph.Node:
		return f.leaf(x, x.Shape(), v.Type()), nil
	case Array:
		if f.keepArrays {
			return f.leaf(x, x.Shape(), v.Type()), nil
		}
		n := &treeNode{kind: arrayKind, typ: v.Type(), template: x}
		for i, c := range x.Components() {
			var child *treeNode
			cpath := fmt.Sprintf("%s.component[%d]", path, i)
			switch {
			case c.IsTensor():
				child = f.leaf(c.Tensor(), c.Shape(), tensorType)
			case c.IsNode():
				child = f.leaf(c.Node(), c.Shape(), nodeType)
			case c.IsArray():
				var err error
				if child, err = f.walk(reflect.ValueOf(c.Array()), cpath); err != nil {
					return nil, err
				}
			default:
				return nil, errors.Errorf("implicitarray: empty component at %s of %s", cpath, TypeName(x))
			}
			n.children = append(n.children, child)
		}
		return n, nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.Elem().Kind() != reflect.Struct {
			break
		}
		child, err := f.walk(v.Elem(), path)
		if err != nil {
			return nil, err
		}
		return &treeNode{kind: pointerKind, typ: v.Type(), children: []*treeNode{child}}, nil
	case reflect.Struct:
		n := &treeNode{kind: structKind, typ: v.Type()}
		for i := range v.NumField() {
			field := v.Type().Field(i)
			if !field.IsExported() {
				return nil, errors.Errorf("implicitarray: unexported field %s.%s of %s cannot be flattened; export it "+
					"or keep it out of the parameter tree", path, field.Name, v.Type())
			}
			child, err := f.walk(v.Field(i), path+"."+field.Name)
			if err != nil {
				return nil, err
			}
			n.names = append(n.names, field.Name)
			n.children = append(n.children, child)
		}
		return n, nil
	case reflect.Map:
		n := &treeNode{kind: mapKind, typ: v.Type(), keys: v.MapKeys()}
		slices.SortFunc(n.keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range n.keys {
			child, err := f.walk(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k))
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, child)
		}
		return n, nil
	case reflect.Slice, reflect.Array:
		if isNumericKind(elemKind(v.Type())) {
			break
		}
		n := &treeNode{kind: sliceKind, typ: v.Type()}
		for i := range v.Len() {
			child, err := f.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			n.children = append(n.children, child)
		}
		return n, nil
	}
	if isNumericKind(elemKind(v.Type())) {
		t, err := goValueToTensor(v.Interface())
		if err != nil {
			return nil, errors.WithMessagef(err, "implicitarray: leaf at %s", path)
		}
		return f.leaf(t, t.Shape(), tensorType), nil
	}
	return nil, errors.Errorf("implicitarray: leaf at %s is a %s; accepted leaves: *tensors.Tensor, *graph.Node, "+
		"an implicitarray.Array, or Go numbers and numeric slices", path, v.Type())
}

func elemKind(t reflect.Type) reflect.Kind {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return t.Kind()
}

func isNumericKind(k reflect.Kind) bool {
	switch k {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func goValueToTensor(v any) (t *tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("cannot convert %T to a tensor: %v", v, r)
		}
	}()
	return tensors.FromAnyValue(v), nil
}

// NumLeaves is the number of leaves Flatten returned.
func (d *TreeDef) NumLeaves() int { return d.numLeaves }

// LeafShapes are the shapes of the leaves, in order.
func (d *TreeDef) LeafShapes() []shapes.Shape {
	var out []shapes.Shape
	var visit func(n *treeNode)
	visit = func(n *treeNode) {
		if n.kind == leafKind {
			out = append(out, n.shape)
		}
		for _, c := range n.children {
			visit(c)
		}
	}
	visit(d.root)
	return out
}

// String describes the structure, the implicit arrays' types, shapes and metadata, and the leaves'
// shapes: two trees with the same String build the same graph, so it keys Exec's cache.
func (d *TreeDef) String() string {
	var sb strings.Builder
	var visit func(n *treeNode)
	visit = func(n *treeNode) {
		switch n.kind {
		case leafKind:
			sb.WriteString(n.shape.String())
			return
		case arrayKind:
			fmt.Fprintf(&sb, "%s%s{%s}", n.typ, n.template.Shape(), n.template.Metadata())
		case structKind:
			sb.WriteString(n.typ.String())
		case pointerKind:
			sb.WriteString("&")
		case mapKind:
			fmt.Fprintf(&sb, "%s%v", n.typ, n.keys)
		case sliceKind:
			sb.WriteString(n.typ.String())
		}
		sb.WriteString("(")
		for i, c := range n.children {
			if i > 0 {
				sb.WriteString(", ")
			}
			if n.kind == structKind {
				sb.WriteString(n.names[i] + ":")
			}
			visit(c)
		}
		sb.WriteString(")")
	}
	visit(d.root)
	return sb.String()
}

// Unflatten rebuilds the tree with the given leaves (tensors, nodes, or implicit arrays for a
// FlattenWithImplicit def) in place of the original ones, with the original types.
func (d *TreeDef) Unflatten(leaves []any) (any, error) {
	v, err := d.UnflattenAs(leaves, d.root.typ)
	if err != nil {
		return nil, err
	}
	return v.Interface(), nil
}

// UnflattenAs rebuilds the tree as a value of type target, whose structure must mirror the
// original one (same field names, same kinds), but whose leaf types may differ: this is how a
// struct of host tensors becomes, inside a graph, a struct of *graph.Node (or Value) fields.
func (d *TreeDef) UnflattenAs(leaves []any, target reflect.Type) (reflect.Value, error) {
	if len(leaves) != d.numLeaves {
		return reflect.Value{}, errors.Errorf("implicitarray: Unflatten got %d leaves, the tree has %d", len(leaves), d.numLeaves)
	}
	u := &unflattener{leaves: leaves}
	return u.build(d.root, target, "tree")
}

type unflattener struct {
	leaves []any
	next   int
}

func (u *unflattener) build(n *treeNode, target reflect.Type, path string) (reflect.Value, error) {
	assign := func(x any) (reflect.Value, error) {
		if x == nil {
			return reflect.Value{}, errors.Errorf("implicitarray: %s: leaf nil does not fit the target type %s", path, target)
		}
		v := reflect.ValueOf(x)
		if !v.Type().AssignableTo(target) {
			return reflect.Value{}, errors.Errorf("implicitarray: %s: a %s does not fit the target type %s", path, v.Type(), target)
		}
		out := reflect.New(target).Elem()
		out.Set(v)
		return out, nil
	}
	switch n.kind {
	case leafKind:
		x := u.leaves[u.next]
		u.next++
		return assign(x)
	case arrayKind:
		comps := make([]Component, len(n.children))
		for i, c := range n.children {
			if c.kind == arrayKind {
				sub, err := u.build(c, arrayType, fmt.Sprintf("%s.component[%d]", path, i))
				if err != nil {
					return reflect.Value{}, err
				}
				comps[i] = ArrayComponent(sub.Interface().(Array))
				continue
			}
			x := u.leaves[u.next]
			u.next++
			switch leaf := x.(type) {
			case *tensors.Tensor:
				comps[i] = TensorComponent(leaf)
			case *graph.Node:
				comps[i] = NodeComponent(leaf)
			case Array:
				comps[i] = ArrayComponent(leaf)
			default:
				return reflect.Value{}, errors.Errorf("implicitarray: %s.component[%d]: leaf %s is not a tensor or node", path, i, describe(x))
			}
			if got := comps[i].Shape(); !got.Equal(c.shape) {
				return reflect.Value{}, errors.Errorf("implicitarray: %s.component[%d]: leaf shape %s, expected %s", path, i, got, c.shape)
			}
		}
		return assign(n.template.WithComponents(comps))
	case pointerKind:
		if target.Kind() != reflect.Pointer {
			return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s is not a pointer", path, target)
		}
		elem, err := u.build(n.children[0], target.Elem(), path)
		if err != nil {
			return reflect.Value{}, err
		}
		p := reflect.New(target.Elem())
		p.Elem().Set(elem)
		return p, nil
	case structKind:
		if target.Kind() != reflect.Struct {
			return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s is not a struct", path, target)
		}
		out := reflect.New(target).Elem()
		for i, name := range n.names {
			field, ok := target.FieldByName(name)
			if !ok {
				return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s has no field %s", path, target, name)
			}
			fv, err := u.build(n.children[i], field.Type, path+"."+name)
			if err != nil {
				return reflect.Value{}, err
			}
			out.FieldByIndex(field.Index).Set(fv)
		}
		return out, nil
	case mapKind:
		if target.Kind() != reflect.Map {
			return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s is not a map", path, target)
		}
		out := reflect.MakeMapWithSize(target, len(n.keys))
		for i, k := range n.keys {
			ev, err := u.build(n.children[i], target.Elem(), fmt.Sprintf("%s[%v]", path, k))
			if err != nil {
				return reflect.Value{}, err
			}
			out.SetMapIndex(k.Convert(target.Key()), ev)
		}
		return out, nil
	case sliceKind:
		var out reflect.Value
		switch target.Kind() {
		case reflect.Slice:
			out = reflect.MakeSlice(target, len(n.children), len(n.children))
		case reflect.Array:
			if target.Len() != len(n.children) {
				return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s has length %d, the tree %d", path, target, target.Len(), len(n.children))
			}
			out = reflect.New(target).Elem()
		default:
			return reflect.Value{}, errors.Errorf("implicitarray: %s: target %s is not a slice or array", path, target)
		}
		for i, c := range n.children {
			ev, err := u.build(c, target.Elem(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return reflect.Value{}, err
			}
			out.Index(i).Set(ev)
		}
		return out, nil
	}
	return reflect.Value{}, errors.Errorf("implicitarray: %s: unknown tree node", path)
}
