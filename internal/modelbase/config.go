package modelbase

import (
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// IntKey is an integer hyper-parameter of a GGUF file: its key, where it goes, and whether it
// may be absent (Dst is then left as it is).
type IntKey struct {
	Key      string
	Dst      *int
	Optional bool
}

// ReadInts reads the keys, each checked to be a count from 1 to fileio.MaxCount before it is
// stored, the error naming the key.
func ReadInts(f *gguf.File, keys []IntKey) error {
	for _, k := range keys {
		if _, has := f.Value(k.Key); !has && k.Optional {
			continue
		}
		v, err := f.Uint(k.Key)
		if err != nil {
			return err
		}
		if err := fileio.CheckInt(k.Key, v, 1, fileio.MaxCount); err != nil {
			return err
		}
		*k.Dst = int(v)
	}
	return nil
}

// ReadFloatAbove reads the float key into dst, checked to be finite and above lo; an absent key
// leaves dst as it is when optional, and is an error otherwise.
func ReadFloatAbove(f *gguf.File, key string, dst *float64, lo float64, optional bool) error {
	if _, has := f.Value(key); !has && optional {
		return nil
	}
	v, err := f.Float(key)
	if err != nil {
		return err
	}
	if err := fileio.CheckFloatAbove(key, v, lo); err != nil {
		return err
	}
	*dst = v
	return nil
}

// CheckLayers bounds a block count by the tensor directory before anything is planned for it:
// the file must hold tensorsPerLayer tensors per block besides the fixed ones. When it does not,
// the error names the first missing tensor (fixed, then layerTensors(0), layerTensors(1), ...)
// and wraps gguf.ErrNotFound; key names the count's GGUF key.
func CheckLayers(f *gguf.File, key string, layers, tensorsPerLayer int, fixed []string, layerTensors func(i int) []string) error {
	n := len(f.Tensors())
	if layers <= (n-len(fixed))/tensorsPerLayer {
		return nil
	}
	fits := max(0, (n-len(fixed))/tensorsPerLayer)
	names := append([]string(nil), fixed...)
	for i := 0; i <= fits && i < layers; i++ {
		names = append(names, layerTensors(i)...)
	}
	for _, name := range names {
		if _, ok := f.Tensor(name); !ok {
			return errors.Wrapf(gguf.ErrNotFound, "tensor %q (%s = %d; the file has the tensors of at most %d layers)", name, key, layers, fits)
		}
	}
	return errors.Wrapf(gguf.ErrNotFound, "%s = %d, but the file has %d tensors; accepted: at most %d layers (%d tensors a layer, plus %d)",
		key, layers, n, fits, tensorsPerLayer, len(fixed))
}
