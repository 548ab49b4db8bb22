// Package ggufbuild writes small GGUF v3 files for tests: metadata of the common types and
// tensors given as raw bytes, laid out as the GGUF specification says (32-byte alignment), and
// such a file opened and closed (Closed).
package ggufbuild

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/quanta-ml/quanta/gguf"
)

// KV is one metadata entry; the value's Go type picks the GGUF type (uint32, int32, float32,
// bool, string, uint64, float64, []string, []int32, []float32).
type KV struct {
	Key   string
	Value any
}

// Tensor is one tensor: GGUF type code, GGML dims (fastest first) and raw data.
type Tensor struct {
	Name string
	Type uint32
	Dims []uint64
	Data []byte
}

// F32 is the GGUF type code of float32 tensors.
const F32 = 0

// F32Tensor returns a float32 tensor of the given GGML dims.
func F32Tensor(name string, values []float32, dims ...uint64) Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, Type: F32, Dims: dims, Data: data}
}

// Build returns the bytes of a GGUF v3 file.
func Build(kvs []KV, tensors []Tensor) []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	w(uint32(3))
	w(uint64(len(tensors)))
	w(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.Key)
		switch v := kv.Value.(type) {
		case uint32:
			w(uint32(4))
			w(v)
		case int32:
			w(uint32(5))
			w(v)
		case float32:
			w(uint32(6))
			w(v)
		case bool:
			w(uint32(7))
			w(v)
		case string:
			w(uint32(8))
			str(v)
		case uint64:
			w(uint32(10))
			w(v)
		case float64:
			w(uint32(12))
			w(v)
		case []string:
			w(uint32(9))
			w(uint32(8))
			w(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			w(uint32(9))
			w(uint32(5))
			w(uint64(len(v)))
			w(v)
		case []float32:
			w(uint32(9))
			w(uint32(6))
			w(uint64(len(v)))
			w(v)
		default:
			panic("ggufbuild: unsupported metadata type")
		}
	}
	const align = 32
	offset := uint64(0)
	for _, t := range tensors {
		str(t.Name)
		w(uint32(len(t.Dims)))
		w(t.Dims)
		w(t.Type)
		w(offset)
		offset = (offset + uint64(len(t.Data)) + align - 1) / align * align
	}
	pad := func() {
		for b.Len()%align != 0 {
			b.WriteByte(0)
		}
	}
	pad()
	for _, t := range tensors {
		b.Write(t.Data)
		pad()
	}
	return b.Bytes()
}

// Override returns kvs with the overrides applied: an entry of the same key replaced, another
// appended, and every entry whose Value is nil removed.
func Override(kvs []KV, overrides ...KV) []KV {
	kvs = append([]KV(nil), kvs...)
	for _, o := range overrides {
		found := false
		for i := range kvs {
			if kvs[i].Key == o.Key {
				kvs[i], found = o, true
			}
		}
		if !found {
			kvs = append(kvs, o)
		}
	}
	var kept []KV
	for _, kv := range kvs {
		if kv.Value != nil {
			kept = append(kept, kv)
		}
	}
	return kept
}

// EOFAtEnd returns a reader of data that returns io.EOF along with a read reaching the end of
// data, as io.ReaderAt allows (bytes.Reader returns nil there): readers must accept both.
func EOFAtEnd(data []byte) io.ReaderAt { return eofAtEnd{bytes.NewReader(data)} }

type eofAtEnd struct{ *bytes.Reader }

func (r eofAtEnd) ReadAt(b []byte, off int64) (int, error) {
	n, err := r.Reader.ReadAt(b, off)
	if err == nil && off+int64(n) == r.Size() {
		err = io.EOF
	}
	return n, err
}

// Closed writes the GGUF file data to a fresh temporary folder, opens it (gguf.Open) and closes
// it: the file returned reads nothing (os.ErrClosed).
func Closed(t testing.TB, data []byte) *gguf.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "closed.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f := gguf.MustOpen(path)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}
