package refdata

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/conformance"
)

// ErrMissing is wrapped by the errors of a reference file or directory that does not exist.
var ErrMissing = errors.New("reference vectors missing")

// EnvDir names the environment variable that overrides Dir.
const EnvDir = "QUANTA_REFERENCE"

// Dir returns the reference/testdata directory: $QUANTA_REFERENCE when set, otherwise
// reference/testdata under the nearest directory, from the working directory up, that holds a
// go.mod file.
func Dir() (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", errors.Wrap(err, "refdata.Dir")
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "reference", "testdata"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.Wrapf(ErrMissing, "refdata.Dir: no go.mod above %s (outside quanta's repository, set %s to its reference/testdata)",
				wd, EnvDir)
		}
	}
}

// Path returns the path of a file of the reference directory, e.g. Path("smollm2", "index.json").
func Path(elem ...string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(append([]string{dir}, elem...)...)
	if _, err := os.Stat(path); err != nil {
		return "", errors.Wrapf(ErrMissing, "refdata: %s (reference/run.sh gen writes it; %s sets the directory, now %s)", path, EnvDir, dir)
	}
	return path, nil
}

// Require returns the path of a reference file, skipping the test with one line if it is absent.
func Require(t testing.TB, elem ...string) string {
	t.Helper()
	path, err := Path(elem...)
	if err != nil {
		t.Skip(err)
	}
	return path
}

// JSON decodes a JSON file of the reference directory into v.
func JSON(v any, elem ...string) error {
	path, err := Path(elem...)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return errors.Wrap(err, "refdata.JSON")
	}
	return errors.Wrapf(json.Unmarshal(raw, v), "refdata.JSON: %s", path)
}

// Array is a numeric .npy array of the reference directory, converted to float64.
type Array struct {
	// DType is the numpy descriptor of the file: "<f4", "<f8" or "<i4".
	DType string
	// Dims are the array's dimensions.
	Dims []int
	// Values are the elements in row-major order.
	Values []float64
}

// Row returns row i of a rank-2 array.
func (a Array) Row(i int) []float64 {
	n := a.Dims[len(a.Dims)-1]
	return a.Values[i*n : (i+1)*n]
}

// Load reads a .npy file of dtype float32, float64 or int32 of the reference directory.
func Load(elem ...string) (Array, error) {
	path, err := Path(elem...)
	if err != nil {
		return Array{}, err
	}
	npy, err := conformance.ReadNPYFile(path)
	if err != nil {
		return Array{}, err
	}
	out := Array{DType: npy.Descr, Dims: npy.Dims}
	data := npy.Data
	switch npy.Descr {
	case "<f4":
		for i := 0; i+4 <= len(data); i += 4 {
			out.Values = append(out.Values, float64(math.Float32frombits(binary.LittleEndian.Uint32(data[i:]))))
		}
	case "<f8":
		for i := 0; i+8 <= len(data); i += 8 {
			out.Values = append(out.Values, math.Float64frombits(binary.LittleEndian.Uint64(data[i:])))
		}
	case "<i4":
		for i := 0; i+4 <= len(data); i += 4 {
			out.Values = append(out.Values, float64(int32(binary.LittleEndian.Uint32(data[i:]))))
		}
	default:
		return Array{}, errors.Errorf("refdata.Load: %s has dtype %q; accepted: '<f4', '<f8', '<i4'", path, npy.Descr)
	}
	return out, nil
}

// Ints reads an int32 .npy file of the reference directory (token ids) as ints.
func Ints(elem ...string) ([]int, error) {
	a, err := Load(elem...)
	if err != nil {
		return nil, err
	}
	if a.DType != "<i4" {
		return nil, errors.Errorf("refdata.Ints: %v holds %q; accepted: '<i4'", elem, a.DType)
	}
	ids := make([]int, len(a.Values))
	for i, v := range a.Values {
		ids[i] = int(v)
	}
	return ids, nil
}

// NPY reads a .npy file of the reference directory as stored: its dtype descriptor, dimensions
// and raw little-endian bytes (any dtype conformance.ReadNPYFile accepts, e.g. '|u1' block bytes).
func NPY(elem ...string) (*conformance.NPY, error) {
	path, err := Path(elem...)
	if err != nil {
		return nil, err
	}
	return conformance.ReadNPYFile(path)
}
