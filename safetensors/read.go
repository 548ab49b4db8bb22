package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// MaxHeaderBytes bounds the JSON header, as the reference implementation does (100 MB).
const MaxHeaderBytes = 100_000_000

// metadataKey is the header entry that holds the free-form string map.
const metadataKey = "__metadata__"

// File is an opened safetensors file: the header is read and validated by Open; tensor data is
// read on demand, by name. Methods are safe for concurrent use (reads go through io.ReaderAt).
type File struct {
	// Metadata is the "__metadata__" string map (empty if the file has none).
	Metadata map[string]string
	// Size is the size of the file in bytes.
	Size int64

	infos  []*Info // in data order
	byName map[string]*Info
	r      io.ReaderAt
	closer fileio.Closer
}

// Info describes one tensor of a file.
type Info struct {
	Name  string
	DType DType
	// Shape is the row-major shape; empty for a scalar.
	Shape []int
	// Offset is the absolute file offset of the tensor's data.
	Offset int64
	// Bytes is the size of the data: the product of Shape times the element size.
	Bytes int64
}

// String describes the tensor: name, dtype and shape.
func (info *Info) String() string { return fmt.Sprintf("%s %s%v", info.Name, info.DType, info.Shape) }

// NumElements returns the product of the shape (1 for a scalar).
func (info *Info) NumElements() int {
	n := 1
	for _, d := range info.Shape {
		n *= d
	}
	return n
}

// Open opens the safetensors file at path and reads and validates its header; the file stays
// open for reading tensors until Close.
func Open(path string) (*File, error) {
	return fileio.Open("safetensors.Open", path, Read, func(f *File) *fileio.Closer { return &f.closer })
}

// MustOpen is Open that panics on error.
func MustOpen(path string) *File { return fileio.Must(Open(path)) }

// Read reads and validates the header of the safetensors content of the given size in r. Close
// on the result is a no-op: r belongs to the caller.
func Read(r io.ReaderAt, size int64) (*File, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: truncated: %d bytes, the header length alone needs 8", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: reading the header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(size-8) {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: truncated: the header length is %d, but the file has %d bytes after it", n, size-8)
	}
	if n > MaxHeaderBytes {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: header length %d is over the limit of %d bytes", n, MaxHeaderBytes)
	}
	header := make([]byte, n)
	if _, err := r.ReadAt(header, 8); err != nil {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: reading the %d-byte header: %v", n, err)
	}
	f, err := parseHeader(header, 8+int64(n), size)
	if err != nil {
		return nil, err
	}
	f.r = r
	return f, nil
}

// rawInfo is one tensor entry of the JSON header.
type rawInfo struct {
	DType       DType    `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

func parseHeader(header []byte, dataStart, size int64) (*File, error) {
	if len(bytes.TrimSpace(header)) == 0 || bytes.TrimSpace(header)[0] != '{' {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: the header is not a JSON object")
	}
	// encoding/json would replace invalid bytes with U+FFFD, renaming the tensor.
	if !utf8.Valid(header) {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: the header is not valid UTF-8; accepted: UTF-8 JSON")
	}
	entries, err := headerEntries(header)
	if err != nil {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: header JSON: %v", err)
	}
	if err := fileio.CheckSurrogates(header); err != nil {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: header JSON: %v", err)
	}
	f := &File{Metadata: map[string]string{}, Size: size, byName: map[string]*Info{}}
	if raw, ok := entries[metadataKey]; ok {
		var metadata map[string]*string // a null value is an error, as in the reference, not ""
		if err := json.Unmarshal(raw, &metadata); err != nil {
			return nil, errors.Wrapf(ErrCorrupt, "safetensors: %s: %v; accepted: an object of strings", metadataKey, err)
		}
		for _, k := range slices.Sorted(maps.Keys(metadata)) {
			if metadata[k] == nil {
				return nil, errors.Wrapf(ErrCorrupt, "safetensors: %s: %q is null; accepted: an object of strings", metadataKey, k)
			}
			f.Metadata[k] = *metadata[k]
		}
		delete(entries, metadataKey)
	}
	dataBytes := size - dataStart
	// By name, so that a file with several bad entries always gets the error of the same one.
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		raw := entries[name]
		ri, err := decodeEntry(raw)
		if err != nil {
			return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %q: %v", name, err)
		}
		info, err := checkInfo(name, ri, dataBytes)
		if err != nil {
			return nil, err
		}
		info.Offset += dataStart
		f.infos = append(f.infos, info)
		f.byName[name] = info
	}
	// By start, then end, as the reference orders them: an empty tensor at the offset where
	// another starts comes first, whatever the names.
	sort.Slice(f.infos, func(i, j int) bool {
		a, b := f.infos[i], f.infos[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		if a.Bytes != b.Bytes {
			return a.Bytes < b.Bytes
		}
		return a.Name < b.Name
	})
	// The data section is exactly the tensors, back to back.
	next := dataStart
	for _, info := range f.infos {
		if info.Offset != next {
			if info.Offset < next {
				return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %s overlaps the previous tensor (starts at data offset %d, previous ends at %d)",
					info, info.Offset-dataStart, next-dataStart)
			}
			return nil, errors.Wrapf(ErrCorrupt, "safetensors: gap before tensor %s: it starts at data offset %d, the previous tensor ends at %d",
				info, info.Offset-dataStart, next-dataStart)
		}
		next += info.Bytes
	}
	if next != size {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: the tensors end at data offset %d, but the data section has %d bytes",
			next-dataStart, dataBytes)
	}
	return f, nil
}

// headerEntries decodes the header object into its entries as the reference implementation
// (serde_json) does: "__metadata__" given twice is an error, where encoding/json would keep the
// last; a tensor name given twice keeps its last entry, as the reference's map does.
func headerEntries(header []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(header))
	if _, err := dec.Token(); err != nil { // '{', checked by the caller
		return nil, err
	}
	entries := map[string]json.RawMessage{}
	err := members(dec, func(key string, value json.RawMessage) error {
		if _, dup := entries[key]; dup && key == metadataKey {
			return errors.Errorf("%q appears twice; accepted: one", metadataKey)
		}
		entries[key] = value
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, err
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, errors.Errorf("after the header object: %v", err)
		}
		return nil, errors.Errorf("%v after the header object; accepted: the object alone", tok)
	}
	return entries, nil
}

// members calls fn with the key and the raw value of each member of the JSON object whose '{' dec
// has read, in order, up to its '}' (left unread), and stops at the first error.
func members(dec *json.Decoder, fn func(key string, value json.RawMessage) error) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // object keys are strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if err := fn(key, value); err != nil {
			return err
		}
	}
	return nil
}

// entryFields are the keys of a tensor entry, each required exactly once.
var entryFields = []string{"dtype", "shape", "data_offsets"}

// decodeEntry decodes one tensor entry by the reference implementation's rules: the keys
// "dtype", "shape" and "data_offsets" (matched exactly, not case-insensitively as encoding/json
// matches struct fields), each present once and not null; other keys are ignored.
func decodeEntry(raw json.RawMessage) (rawInfo, error) {
	var ri rawInfo
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ri, errors.Errorf("%s; accepted: an object with %q, %q and %q", raw, entryFields[0], entryFields[1], entryFields[2])
	}
	seen := map[string]bool{}
	err := members(dec, func(key string, value json.RawMessage) error {
		var field any
		switch key {
		case "dtype":
			field = &ri.DType
		case "shape":
			field = &ri.Shape
		case "data_offsets":
			field = &ri.DataOffsets
		default:
			return nil
		}
		if seen[key] {
			return errors.Errorf("field %q appears twice", key)
		}
		seen[key] = true
		if string(value) == "null" {
			return errors.Errorf("field %q is null", key)
		}
		if err := json.Unmarshal(value, field); err != nil {
			return errors.Wrapf(err, "field %q", key)
		}
		return nil
	})
	if err != nil {
		return ri, err
	}
	for _, key := range entryFields {
		if !seen[key] {
			return ri, errors.Errorf("missing field %q", key)
		}
	}
	return ri, nil
}

// checkInfo validates one header entry against the size of the data section.
func checkInfo(name string, ri rawInfo, dataBytes int64) (*Info, error) {
	if !ri.DType.Valid() {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %q: dtype %q; accepted: %s", name, ri.DType, acceptedDTypes)
	}
	if len(ri.DataOffsets) != 2 {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %q: data_offsets %v; accepted: [begin, end]", name, ri.DataOffsets)
	}
	begin, end := ri.DataOffsets[0], ri.DataOffsets[1]
	if begin > end || end > uint64(dataBytes) {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: truncated or corrupt: tensor %q has data_offsets [%d, %d], the data section has %d bytes",
			name, begin, end, dataBytes)
	}
	info := &Info{Name: name, DType: ri.DType, Shape: make([]int, len(ri.Shape)), Offset: int64(begin), Bytes: int64(end - begin)}
	// No product overflows, and the byte count must then be the data_offsets' (within the data
	// section). A tensor with a zero dimension has no elements whatever its other dimensions, as
	// the reference implementation accepts it.
	nbytes, ok := tensorBytes(ri.DType, ri.Shape)
	if !ok {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %q: %s shape %v; accepted: non-negative dimensions whose "+
			"product fits an int64 (in bits), of whole bytes", name, ri.DType, ri.Shape)
	}
	for i, d := range ri.Shape {
		info.Shape[i] = int(d)
	}
	if nbytes != end-begin {
		return nil, errors.Wrapf(ErrCorrupt, "safetensors: tensor %q: %s%v needs %d bytes, data_offsets [%d, %d] give %d",
			name, ri.DType, ri.Shape, nbytes, begin, end, end-begin)
	}
	return info, nil
}

// Close closes the file opened by Open.
func (f *File) Close() error { return f.closer.Close() }

// Names returns the tensor names in the order of their data in the file.
func (f *File) Names() []string {
	names := make([]string, len(f.infos))
	for i, info := range f.infos {
		names[i] = info.Name
	}
	return names
}

// Info returns the description of the tensor called name.
func (f *File) Info(name string) (*Info, bool) {
	info, ok := f.byName[name]
	return info, ok
}

func (f *File) lookup(op, name string) (*Info, error) {
	return fileio.Lookup(f.byName, ErrNotFound, "safetensors."+op, name)
}

// ReadBytes returns the raw little-endian data of the tensor called name.
func (f *File) ReadBytes(name string) ([]byte, error) {
	info, err := f.lookup("ReadBytes", name)
	if err != nil {
		return nil, err
	}
	if err := f.checkHeld("ReadBytes", info); err != nil {
		return nil, err
	}
	buf := make([]byte, info.Bytes)
	return buf, f.readInto("ReadBytes", info, buf)
}

// ReadInto reads the raw data of the tensor called name into dst, which must have exactly its
// size.
func (f *File) ReadInto(name string, dst []byte) error {
	info, err := f.lookup("ReadInto", name)
	if err != nil {
		return err
	}
	if int64(len(dst)) != info.Bytes {
		return errors.Errorf("safetensors.ReadInto: tensor %s has %d bytes, destination %d", info, info.Bytes, len(dst))
	}
	return f.readInto("ReadInto", info, dst)
}

// checkHeld reads the tensor's last byte: Read trusts the size its caller gives, so the reader
// must be seen to hold the tensor before memory in proportion to it is allocated.
func (f *File) checkHeld(op string, info *Info) error {
	if info.Bytes == 0 {
		return nil
	}
	var last [1]byte
	if k, err := f.r.ReadAt(last[:], info.Offset+info.Bytes-1); k != 1 {
		return errors.Wrapf(ErrCorrupt, "safetensors.%s: tensor %s: %d bytes at offset %d, but reading its last byte failed: %v",
			op, info, info.Bytes, info.Offset, err)
	}
	return nil
}

func (f *File) readInto(op string, info *Info, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if _, err := f.r.ReadAt(dst, info.Offset); err != nil {
		return errors.Wrapf(ErrCorrupt, "safetensors.%s: tensor %s: reading %d bytes at offset %d: %v", op, info, len(dst), info.Offset, err)
	}
	return nil
}

// ReadTensor reads the tensor called name into a new GoMLX tensor of its dtype and shape, copying
// the file's bytes straight into the tensor's storage. 8-bit and sub-byte float tensors are an
// error wrapping ErrUnsupported (read them with ReadBytes).
func (f *File) ReadTensor(name string) (*tensors.Tensor, error) {
	info, err := f.lookup("ReadTensor", name)
	if err != nil {
		return nil, err
	}
	dtype, ok := info.DType.GoMLX()
	if !ok {
		return nil, errors.Wrapf(ErrUnsupported, "safetensors.ReadTensor: tensor %s: GoMLX has no %s tensors; use ReadBytes", info, info.DType)
	}
	if !littleEndianHost {
		return nil, errors.Wrapf(ErrUnsupported, "safetensors.ReadTensor: a big-endian host")
	}
	if err := f.checkHeld("ReadTensor", info); err != nil {
		return nil, err
	}
	t := tensors.FromShape(shapes.Make(dtype, info.Shape...))
	if info.Bytes == 0 {
		return t, nil
	}
	var readErr error
	if err := t.MutableBytes(func(data []byte) { readErr = f.readInto("ReadTensor", info, data) }); err != nil {
		return nil, errors.Wrapf(err, "safetensors.ReadTensor: tensor %s", info)
	}
	if readErr != nil {
		_ = t.FinalizeAll()
		return nil, readErr
	}
	return t, nil
}

// MustReadTensor is ReadTensor that panics on error.
func (f *File) MustReadTensor(name string) *tensors.Tensor { return fileio.Must(f.ReadTensor(name)) }

// littleEndianHost is true on the hosts whose memory layout matches the file's.
var littleEndianHost = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// convertChunk is how many stored bytes ReadFloat32 converts at a time.
const convertChunk = 1 << 20

// ReadFloat32 reads the float tensor called name (F32, F16, BF16 or F64) into a new float32
// GoMLX tensor of its shape: F16 and BF16 exactly, F64 rounded to the nearest float32 (±Inf
// beyond float32's range). The data is converted through a buffer of at most 1 MiB, so no copy
// of the stored tensor is made. Other dtypes are an error wrapping ErrUnsupported.
func (f *File) ReadFloat32(name string) (*tensors.Tensor, error) {
	info, err := f.lookup("ReadFloat32", name)
	if err != nil {
		return nil, err
	}
	size := info.DType.Size()
	switch info.DType {
	case F32:
		return f.ReadTensor(name)
	case F16, BF16, F64:
	default:
		return nil, errors.Wrapf(ErrUnsupported, "safetensors.ReadFloat32: tensor %s; accepted: F32, F16, BF16 or F64", info)
	}
	if err := f.checkHeld("ReadFloat32", info); err != nil {
		return nil, err
	}
	t := tensors.FromShape(shapes.Make(dtypes.Float32, info.Shape...))
	var readErr error
	tensors.MustMutableFlatData(t, func(dst []float32) {
		buf := make([]byte, min(int64(convertChunk), info.Bytes))
		for done := 0; done < len(dst) && readErr == nil; {
			n := min(len(buf)/size, len(dst)-done)
			chunk := buf[:n*size]
			part := &Info{Name: info.Name, DType: info.DType, Shape: info.Shape, Offset: info.Offset + int64(done*size)}
			if readErr = f.readInto("ReadFloat32", part, chunk); readErr != nil {
				break
			}
			out := dst[done : done+n]
			switch info.DType {
			case F16:
				fileio.DecodeF16(chunk, out)
			case BF16:
				fileio.DecodeBF16(chunk, out)
			case F64:
				for i := range out {
					out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(chunk[8*i:])))
				}
			}
			done += n
		}
	})
	if readErr != nil {
		_ = t.FinalizeAll()
		return nil, readErr
	}
	return t, nil
}

// MustReadFloat32 is ReadFloat32 that panics on error.
func (f *File) MustReadFloat32(name string) *tensors.Tensor { return fileio.Must(f.ReadFloat32(name)) }
