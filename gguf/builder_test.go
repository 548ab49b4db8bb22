package gguf_test

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/quanta-ml/quanta/gguf"
)

// kv is one metadata entry for buildGGUF: the value is encoded by its Go type.
type kv struct {
	key   string
	value any
}

// tensorSpec is one tensor for buildGGUF; offset < 0 places it after the previous one.
type tensorSpec struct {
	name   string
	typ    gguf.Type
	dims   []uint64
	data   []byte
	offset int64
}

// ggufBuilder writes GGUF v3 bytes by hand, as the specification lays them out, so that tests
// can also write broken files.
type ggufBuilder struct {
	bytes.Buffer
}

func (b *ggufBuilder) u32(v uint32) { _ = binary.Write(&b.Buffer, binary.LittleEndian, v) }
func (b *ggufBuilder) u64(v uint64) { _ = binary.Write(&b.Buffer, binary.LittleEndian, v) }
func (b *ggufBuilder) str(s string) { b.u64(uint64(len(s))); b.WriteString(s) }

// valueType returns the GGUF type code of a Go value.
func valueType(v any) uint32 {
	switch v.(type) {
	case uint8:
		return 0
	case int8:
		return 1
	case uint16:
		return 2
	case int16:
		return 3
	case uint32:
		return 4
	case int32:
		return 5
	case float32:
		return 6
	case bool:
		return 7
	case string:
		return 8
	case uint64:
		return 10
	case int64:
		return 11
	case float64:
		return 12
	}
	return 9
}

func (b *ggufBuilder) value(v any) {
	switch x := v.(type) {
	case string:
		b.str(x)
	case bool:
		if x {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	case []string:
		b.u32(8)
		b.u64(uint64(len(x)))
		for _, s := range x {
			b.str(s)
		}
	case []int32:
		b.u32(5)
		b.u64(uint64(len(x)))
		for _, i := range x {
			b.u32(uint32(i))
		}
	case []float32:
		b.u32(6)
		b.u64(uint64(len(x)))
		for _, f := range x {
			b.u32(math.Float32bits(f))
		}
	case []any: // array of arrays
		b.u32(9)
		b.u64(uint64(len(x)))
		for _, e := range x {
			b.value(e)
		}
	default:
		_ = binary.Write(&b.Buffer, binary.LittleEndian, v)
	}
}

// buildGGUF returns a GGUF v3 file with the given metadata and tensors, aligned to 32 bytes.
func buildGGUF(kvs []kv, tensors []tensorSpec) []byte {
	var b ggufBuilder
	b.WriteString("GGUF")
	b.u32(3)
	b.u64(uint64(len(tensors)))
	b.u64(uint64(len(kvs)))
	for _, e := range kvs {
		b.str(e.key)
		b.u32(valueType(e.value))
		b.value(e.value)
	}
	const align = 32
	offsets := make([]int64, len(tensors))
	next := int64(0)
	for i, t := range tensors {
		offsets[i] = t.offset
		if t.offset < 0 {
			offsets[i] = next
		}
		next = (offsets[i] + int64(len(t.data)) + align - 1) / align * align
		b.str(t.name)
		b.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			b.u64(d)
		}
		b.u32(uint32(t.typ))
		b.u64(uint64(offsets[i]))
	}
	for b.Len()%align != 0 {
		b.WriteByte(0)
	}
	base := int64(b.Len())
	for i, t := range tensors {
		for int64(b.Len()) < base+offsets[i] {
			b.WriteByte(0)
		}
		if int64(b.Len()) == base+offsets[i] {
			b.Write(t.data)
		}
	}
	return b.Bytes()
}

// f16Bytes is the little-endian half-precision encoding of exactly representable values.
func f16Bytes(bits ...uint16) []byte {
	out := make([]byte, 2*len(bits))
	for i, v := range bits {
		binary.LittleEndian.PutUint16(out[2*i:], v)
	}
	return out
}

// f32Bytes is the little-endian encoding of float32 values.
func f32Bytes(values ...float32) []byte {
	out := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}
