package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// Tensor is one tensor to write: its raw little-endian data, dtype and row-major shape.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// FromTensor copies a GoMLX tensor into a Tensor to write under name.
func FromTensor(name string, t *tensors.Tensor) (Tensor, error) {
	dtype, err := fromGoMLX(t.DType())
	if err != nil {
		return Tensor{}, errors.WithMessagef(err, "safetensors.FromTensor(%q)", name)
	}
	if !littleEndianHost {
		return Tensor{}, errors.Wrapf(ErrUnsupported, "safetensors.FromTensor: a big-endian host")
	}
	out := Tensor{Name: name, DType: dtype, Shape: t.Shape().Clone().Dimensions}
	if t.Size() == 0 {
		out.Data = []byte{}
		return out, nil
	}
	if err := t.ConstBytes(func(data []byte) { out.Data = append([]byte(nil), data...) }); err != nil {
		return Tensor{}, errors.Wrapf(err, "safetensors.FromTensor(%q)", name)
	}
	return out, nil
}

// Header returns the JSON header Write writes for these tensors and metadata, without the length
// prefix, padded with spaces to a multiple of 8 bytes so that the data section starts aligned.
//
// The header is deterministic: "__metadata__" first (when not empty), its keys sorted, then the
// tensors in the given order, which is also the order of their data.
func Header(list []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return nil, errors.Errorf("safetensors: metadata %q: %q is not valid UTF-8; accepted: UTF-8 keys and values "+
					"(JSON would replace the invalid bytes)", k, metadata[k])
			}
		}
		b.WriteString(`"` + metadataKey + `":{`)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
	}
	seen := map[string]bool{}
	offset := uint64(0)
	for i, t := range list {
		if err := checkTensor(t, seen); err != nil {
			return nil, err
		}
		if i > 0 || len(metadata) > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, t.Name)
		b.WriteString(`:{"dtype":"` + string(t.DType) + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		end := offset + uint64(len(t.Data))
		b.WriteString(`],"data_offsets":[` + strconv.FormatUint(offset, 10) + `,` + strconv.FormatUint(end, 10) + `]}`)
		offset = end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderBytes {
		return nil, errors.Errorf("safetensors: the header of %d tensors and %d metadata entries has %d bytes, over the limit of "+
			"%d that Read (and the reference implementation) accepts", len(list), len(metadata), b.Len(), MaxHeaderBytes)
	}
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a Go string always marshals
	b.Write(enc)
}

// checkTensor validates one tensor to write.
func checkTensor(t Tensor, seen map[string]bool) error {
	switch {
	case t.Name == "" || t.Name == metadataKey:
		return errors.Errorf("safetensors: tensor name %q; accepted: a non-empty name other than %q", t.Name, metadataKey)
	case !utf8.ValidString(t.Name):
		return errors.Errorf("safetensors: tensor name %q is not valid UTF-8; accepted: a UTF-8 name (JSON would replace the "+
			"invalid bytes, and the tensor would not read back under its name)", t.Name)
	case seen[t.Name]:
		return errors.Errorf("safetensors: tensor %q appears twice", t.Name)
	case !t.DType.Valid():
		return errors.Errorf("safetensors: tensor %q: dtype %q; accepted: %s", t.Name, t.DType, acceptedDTypes)
	}
	seen[t.Name] = true
	// The rule of Read: non-negative dimensions whose product is the data's elements.
	want, ok := tensorBytes(t.DType, t.Shape)
	if !ok {
		return errors.Errorf("safetensors: tensor %q: %s shape %v; accepted: non-negative dimensions whose product fits an int64 "+
			"(in bits), of whole bytes", t.Name, t.DType, t.Shape)
	}
	if uint64(len(t.Data)) != want {
		return errors.Errorf("safetensors: tensor %q: %d bytes of data for %s%v, which needs %d", t.Name, len(t.Data), t.DType, t.Shape, want)
	}
	return nil
}

// Write writes a safetensors file to w: the header (see Header), then the tensors' data in order.
// Nothing is written if the tensors are invalid (duplicate or empty names, unknown dtypes, data
// whose size does not match dtype and shape) or the header would exceed MaxHeaderBytes.
func Write(w io.Writer, list []Tensor, metadata map[string]string) error {
	header, err := Header(list, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(header)))
	if _, err := bw.Write(lenBuf[:]); err != nil {
		return errors.Wrap(err, "safetensors.Write")
	}
	if _, err := bw.Write(header); err != nil {
		return errors.Wrap(err, "safetensors.Write")
	}
	for _, t := range list {
		if _, err := bw.Write(t.Data); err != nil {
			return errors.Wrapf(err, "safetensors.Write: tensor %q", t.Name)
		}
	}
	return errors.Wrap(bw.Flush(), "safetensors.Write")
}

// WriteFile writes a safetensors file at path (see Write) through a temporary file in the same
// directory renamed into place, so that path never holds a partial file. The file's mode is
// 0644, as a file written with os.WriteFile(path, data, 0644) under the usual umask: a model or
// adapter file is read by other users and programs (the temporary file alone would be 0600).
func WriteFile(path string, list []Tensor, metadata map[string]string) error {
	if _, err := Header(list, metadata); err != nil {
		return err
	}
	return fileio.WriteAtomic("safetensors.WriteFile", path, func(w io.Writer) error { return Write(w, list, metadata) })
}
