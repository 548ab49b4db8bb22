package modelbase

import (
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
)

// hostBytes is a uint8 tensor being filled by the loader and its bytes: on the device of the
// loader's backend where the backend shares host memory with it (XLA CPU, the pure-Go backend),
// so that a stored tensor is read from the file straight into its device buffer and the load
// never holds it twice; otherwise a local tensor.
type hostBytes struct {
	t     *tensors.Tensor
	bytes []byte
}

// newBytes allocates a uint8 tensor of shape, on the device where the backend shares its memory.
func (v *Vars) newBytes(shape shapes.Shape) (hostBytes, error) {
	if v.backend == nil || !v.backend.HasSharedBuffers() {
		t := tensors.FromShape(shape)
		var b []byte
		if err := t.MutableBytes(func(data []byte) { b = data }); err != nil {
			return hostBytes{}, err
		}
		return hostBytes{t, b}, nil // a local tensor's storage stays where it is
	}
	buffer, flat, err := v.backend.NewSharedBuffer(0, shape)
	if err != nil {
		return hostBytes{}, errors.WithMessagef(err, "allocating %s on the device", shape)
	}
	b, ok := flat.([]uint8)
	if !ok || len(b) != shape.Size() {
		_ = v.backend.BufferFinalize(buffer)
		return hostBytes{}, errors.Errorf("the device's buffer for %s is a %T of %d", shape, flat, len(b))
	}
	t, err := tensors.FromBuffer(v.backend, buffer)
	if err != nil {
		_ = v.backend.BufferFinalize(buffer)
		return hostBytes{}, err
	}
	return hostBytes{t, b}, nil
}
