package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
)

// Index is testdata/index.json: the versions that produced the vectors and every case.
type Index struct {
	// Format is the index format version (1).
	Format int `json:"format"`
	// Versions of eformer, jax, jaxlib, numpy, ... that produced the vectors.
	Versions map[string]string `json:"versions"`
	// Counts is the number of cases per kind.
	Counts map[string]int `json:"counts"`
	// NF4Codebook is the 16-value codebook eformer quantizes against.
	NF4Codebook []float32 `json:"nf4_codebook"`
	// Cases, in generation order.
	Cases []Case `json:"cases"`

	dir string
}

// Case is one eformer call and its recorded inputs and outputs (or error).
type Case struct {
	// ID names the case and prefixes its files.
	ID string `json:"id"`
	// Kind is one of nf4, int8, onebit, binary, ternary, ste, matmul, error.
	Kind string `json:"kind"`
	// Call is the Python expression that produced the outputs.
	Call string `json:"call"`
	// Params are the case's parameters; their fields depend on Kind (see DecodeParams).
	Params json.RawMessage `json:"params"`
	// Attrs are the static fields of the eformer object (shape, dtype, block size, axis).
	Attrs json.RawMessage `json:"attrs"`
	// Inputs and Outputs name the arrays by role ("x", "packed", "absmax", ...).
	Inputs  map[string]arrayRef `json:"inputs"`
	Outputs map[string]arrayRef `json:"outputs"`
	// Error is what eformer raised, for Kind "error".
	Error *raisedError `json:"error"`
	// Note explains what the case probes.
	Note string `json:"note"`
}

// arrayRef points to one .npy file of a case.
type arrayRef struct {
	File  string `json:"file"`
	Shape []int  `json:"shape"`
	// DType is the logical dtype ("float32", "bfloat16", ...).
	DType string `json:"dtype"`
	// StoredDType is the dtype in the file: "uint16" holds bfloat16 bits.
	StoredDType string `json:"stored_dtype"`
}

// raisedError is the exception eformer raised.
type raisedError struct {
	Type    string `json:"type"`
	Module  string `json:"module"`
	Message string `json:"message"`
}

// LoadIndex reads dir/index.json.
func LoadIndex(dir string) (*Index, error) {
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, errors.Wrap(err, "conformance.LoadIndex")
	}
	idx := &Index{dir: dir}
	if err := json.Unmarshal(data, idx); err != nil {
		return nil, errors.Wrapf(err, "conformance.LoadIndex: parsing %s", filepath.Join(dir, "index.json"))
	}
	if idx.Format != 1 {
		return nil, errors.Errorf("conformance.LoadIndex: index format %d; accepted: 1", idx.Format)
	}
	if len(idx.NF4Codebook) != 16 {
		return nil, errors.Errorf("conformance.LoadIndex: nf4_codebook has %d values, want 16", len(idx.NF4Codebook))
	}
	return idx, nil
}

// decodeParams unmarshals the case's params into p (a pointer to a struct with json tags).
func (c *Case) decodeParams(p any) error {
	return errors.Wrapf(json.Unmarshal(c.Params, p), "case %s: params", c.ID)
}

// Input loads the input array named name.
func (idx *Index) Input(c *Case, name string) (*tensors.Tensor, error) {
	return idx.load(c, "input", c.Inputs, name)
}

// Output loads the output array named name.
func (idx *Index) Output(c *Case, name string) (*tensors.Tensor, error) {
	return idx.load(c, "output", c.Outputs, name)
}

func (idx *Index) load(c *Case, role string, refs map[string]arrayRef, name string) (*tensors.Tensor, error) {
	ref, ok := refs[name]
	if !ok {
		return nil, errors.Errorf("case %s has no %s %q", c.ID, role, name)
	}
	t, err := loadTensor(filepath.Join(idx.dir, ref.File), ref)
	return t, errors.WithMessagef(err, "case %s %s %q", c.ID, role, name)
}

// logicalDTypes maps the index's dtype names to GoMLX dtypes.
var logicalDTypes = map[string]dtypes.DType{
	"float64": dtypes.Float64, "float32": dtypes.Float32, "float16": dtypes.Float16, "bfloat16": dtypes.BFloat16,
	"uint8": dtypes.Uint8, "int8": dtypes.Int8, "uint16": dtypes.Uint16, "int32": dtypes.Int32, "bool": dtypes.Bool,
}

// storedDescr maps the index's stored dtype names to .npy descriptors.
var storedDescr = map[string]string{
	"float64": "<f8", "float32": "<f4", "float16": "<f2", "uint8": "|u1", "int8": "|i1", "uint16": "<u2",
	"int32": "<i4", "bool": "|b1",
}

// dtypeOf returns the GoMLX dtype of an index dtype name ("float32", "bfloat16", ...).
func dtypeOf(name string) (dtypes.DType, error) {
	dtype, ok := logicalDTypes[name]
	if !ok {
		return dtypes.InvalidDType, errors.Errorf("conformance: unknown dtype %q", name)
	}
	return dtype, nil
}

// loadTensor reads the .npy file at path and returns a host tensor of ref's logical dtype and
// shape, checking the file against ref. bfloat16 arrays are stored as their uint16 bits.
func loadTensor(path string, ref arrayRef) (*tensors.Tensor, error) {
	arr, err := ReadNPYFile(path)
	if err != nil {
		return nil, err
	}
	t, err := tensorFromNPY(arr, ref)
	return t, errors.WithMessagef(err, "conformance.LoadTensor: %s", path)
}

// tensorFromNPY checks a parsed .npy array against ref and returns it as a host tensor of ref's
// logical dtype.
func tensorFromNPY(arr *NPY, ref arrayRef) (*tensors.Tensor, error) {
	if want := storedDescr[ref.StoredDType]; arr.Descr != want {
		return nil, errors.Errorf("the array holds %q, the index says %s (%q)", arr.Descr, ref.StoredDType, want)
	}
	if len(ref.Shape) == 0 && slices.Equal(arr.Dims, []int{1}) {
		// gen_vectors.py passes arrays through np.ascontiguousarray, which turns a 0-d array into
		// shape (1,): the index keeps the true shape ().
		arr.Dims = []int{}
	}
	if !slices.Equal(arr.Dims, ref.Shape) {
		return nil, errors.Errorf("the array has shape %v, the index says %v", arr.Dims, ref.Shape)
	}
	dtype, err := dtypeOf(ref.DType)
	if err != nil {
		return nil, err
	}
	if stored := logicalDTypes[ref.StoredDType]; stored != dtype && !(dtype == dtypes.BFloat16 && stored == dtypes.Uint16) {
		return nil, errors.Errorf("dtype %s stored as %s; only bfloat16 may be stored as uint16 bits", ref.DType, ref.StoredDType)
	}
	t := tensors.FromShape(shapes.Make(dtype, arr.Dims...))
	if t.Size() == 0 {
		return t, nil
	}
	err = t.MutableBytes(func(data []byte) {
		copy(data, arr.Data)
	})
	return t, err
}
