package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/fileio"
)

// Magic is the first four bytes of a GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the alignment of the data section and of each tensor's offset when the
// file has no "general.alignment" key.
const DefaultAlignment = 32

// maxDims is GGML_MAX_DIMS: a tensor has at most 4 dimensions.
const maxDims = 4

// maxArrayDepth bounds the nesting of metadata arrays.
const maxArrayDepth = 3

// File is an opened GGUF file: its metadata and tensor directory are read and validated by Open;
// tensor data is read on demand, one tensor at a time. The methods are safe for concurrent use
// (reads go through io.ReaderAt).
type File struct {
	// Version is the GGUF version (2 or 3).
	Version uint32
	// Alignment is the alignment of the data section and tensor offsets, in bytes.
	Alignment int
	// DataOffset is the absolute file offset of the data section.
	DataOffset int64
	// Size is the size of the file in bytes.
	Size int64

	keys    []string
	meta    map[string]any
	tensors []*Tensor
	byName  map[string]*Tensor

	r      io.ReaderAt
	closer fileio.Closer
}

// Tensor describes one tensor of a GGUF file.
type Tensor struct {
	// Name as stored, e.g. "blk.0.attn_q.weight".
	Name string
	// Type of the stored elements.
	Type Type
	// Dims in GGML order: Dims[0] varies fastest (a llama.cpp weight of a layer y = W·x with
	// x of size in and y of size out has Dims [in, out], the layout of a row-major [out][in]).
	Dims []int
	// Offset is the absolute offset of the tensor's data in the file.
	Offset int64
	// Bytes is the size of the tensor's data.
	Bytes int64
}

// Shape returns the row-major shape of the tensor: Dims reversed (Dims [in, out] gives [out, in]).
func (t *Tensor) Shape() []int {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[len(t.Dims)-1-i] = d
	}
	return shape
}

// NumElements returns the number of elements of the tensor.
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// String describes the tensor: name, type and GGML dims.
func (t *Tensor) String() string {
	return fmt.Sprintf("%s %s %v", t.Name, t.Type, t.Dims)
}

// Open opens the GGUF file at path and reads its header, metadata and tensor directory,
// validating every size and offset against the file size. The file stays open for reading tensor
// data until Close.
func Open(path string) (*File, error) {
	return fileio.Open("gguf.Open", path, Read, func(f *File) *fileio.Closer { return &f.closer })
}

// MustOpen is Open that panics on error.
func MustOpen(path string) *File { return fileio.Must(Open(path)) }

// Read reads the header, metadata and tensor directory of the GGUF content of the given size
// in r, as Open does. Close on the result is a no-op: r belongs to the caller.
//
// Every length and count is checked against size, and one spanning more than 64 KiB also against
// r (a ReadAt of the span's last byte) before anything is allocated for it: given a size larger
// than what r holds (math.MaxInt64 for a reader of unknown length), a string or array running
// past the content is an error wrapping ErrCorrupt, and Read allocates in proportion to the bytes
// r holds, plus less than 1 MiB. Tensor data is checked against size only; ReadRaw and
// ReadFloat32 check that r holds a tensor's last byte before allocating for it, and a tensor
// past the end of r is an error wrapping ErrCorrupt.
func Read(r io.ReaderAt, size int64) (*File, error) {
	p := &parser{r: r, br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size}
	f := &File{Size: size, r: r, meta: map[string]any{}, byName: map[string]*Tensor{}}
	if err := p.header(f); err != nil {
		return nil, err
	}
	return f, nil
}

// Close closes the file opened by Open.
func (f *File) Close() error { return f.closer.Close() }

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string { return append([]string(nil), f.keys...) }

// Value returns the metadata value of key: uint8, int8, uint16, int16, uint32, int32, uint64,
// int64, float32, float64, bool or string; an array is a slice of one of these ([]string,
// []int32, ...), or []any for an array of arrays.
func (f *File) Value(key string) (any, bool) {
	v, ok := f.meta[key]
	return v, ok
}

// Get returns the metadata value of key as a T, which must be its exact stored type (see Value).
func Get[T any](f *File, key string) (T, error) {
	var zero T
	v, ok := f.meta[key]
	if !ok {
		return zero, errors.Wrapf(ErrNotFound, "gguf: metadata key %q", key)
	}
	t, ok := v.(T)
	if !ok {
		return zero, errors.Wrapf(ErrCorrupt, "gguf: metadata %q is %T; accepted: %T", key, v, zero)
	}
	return t, nil
}

// String returns the string value of key.
func (f *File) String(key string) (string, error) { return Get[string](f, key) }

// Strings returns the string-array value of key.
func (f *File) Strings(key string) ([]string, error) { return Get[[]string](f, key) }

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) { return Get[bool](f, key) }

// Uint returns the value of key, stored as any integer type, as a uint64; a negative value is an
// error.
func (f *File) Uint(key string) (uint64, error) {
	v, ok := f.meta[key]
	if !ok {
		return 0, errors.Wrapf(ErrNotFound, "gguf: metadata key %q", key)
	}
	var i int64
	switch x := v.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8:
		i = int64(x)
	case int16:
		i = int64(x)
	case int32:
		i = int64(x)
	case int64:
		i = x
	default:
		return 0, errors.Wrapf(ErrCorrupt, "gguf: metadata %q is %T; accepted: an integer", key, v)
	}
	if i < 0 {
		return 0, errors.Wrapf(ErrCorrupt, "gguf: metadata %q is %d; accepted: a non-negative integer", key, i)
	}
	return uint64(i), nil
}

// Float returns the value of key, stored as float32 or float64, as a float64.
func (f *File) Float(key string) (float64, error) {
	v, ok := f.meta[key]
	if !ok {
		return 0, errors.Wrapf(ErrNotFound, "gguf: metadata key %q", key)
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, errors.Wrapf(ErrCorrupt, "gguf: metadata %q is %T; accepted: float32 or float64", key, v)
}

// Tensors returns the tensor directory in file order.
func (f *File) Tensors() []*Tensor { return append([]*Tensor(nil), f.tensors...) }

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.byName[name]
	return t, ok
}

func (f *File) lookup(op, name string) (*Tensor, error) {
	return fileio.Lookup(f.byName, ErrNotFound, "gguf."+op, name)
}

// holds checks that the reader holds the tensor's last byte, before anything is allocated for the
// tensor: the size given to Read may be larger than the content.
func (f *File) holds(t *Tensor) error {
	if t.Bytes == 0 {
		return nil
	}
	var last [1]byte
	return readAt(f.r, last[:], t.Offset+t.Bytes-1)
}

// ReadRaw returns the stored bytes of the tensor called name.
func (f *File) ReadRaw(name string) ([]byte, error) {
	t, err := f.lookup("ReadRaw", name)
	if err != nil {
		return nil, err
	}
	if err := f.holds(t); err != nil {
		return nil, errors.WithMessagef(err, "gguf.ReadRaw: tensor %q (%d bytes at offset %d)", name, t.Bytes, t.Offset)
	}
	buf := make([]byte, t.Bytes)
	if len(buf) == 0 {
		return buf, nil // an empty tensor may end the file, where reading nothing is io.EOF
	}
	if err := readAt(f.r, buf, t.Offset); err != nil {
		return nil, errors.WithMessagef(err, "gguf.ReadRaw: tensor %q (%d bytes at offset %d)", name, t.Bytes, t.Offset)
	}
	return buf, nil
}

// ReadFloat32 decodes the tensor called name to float32 (see Decode), in row-major order of
// Shape.
func (f *File) ReadFloat32(name string) ([]float32, error) {
	t, err := f.lookup("ReadFloat32", name)
	if err != nil {
		return nil, err
	}
	if err := f.holds(t); err != nil {
		return nil, errors.WithMessagef(err, "gguf.ReadFloat32: tensor %s (%d bytes at offset %d)", t, t.Bytes, t.Offset)
	}
	dst := make([]float32, t.NumElements())
	if err := f.DecodeInto(name, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// readAt fills b from r at offset off. A reader may return io.EOF along with all of b when b ends
// its input (io.ReaderAt allows it): that is no error. A short read (the file cut after it was
// opened) is an error wrapping ErrCorrupt; another error of the reader (a closed file, an I/O
// error) is returned as it is.
func readAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.Wrapf(ErrCorrupt, "truncated: %d of %d bytes", n, len(b))
	}
	return err
}

// decodeChunk is how many bytes of stored data DecodeInto reads at a time.
const decodeChunk = 1 << 20

// DecodeInto decodes the tensor called name into dst, which must have exactly its number of
// elements, reading the file a chunk at a time (no copy of the whole stored tensor is made). A
// block whose scale is NaN or infinite (CheckScales), which would decode to NaN or infinite
// values, is an error wrapping ErrCorrupt naming the tensor, the block and the scale, and so is
// an F32, F16 or BF16 element that is NaN or infinite, naming the element (llama.cpp's
// ggml_validate_row_data refuses both); Decode decodes such bytes as ggml does.
func (f *File) DecodeInto(name string, dst []float32) error {
	t, err := f.lookup("DecodeInto", name)
	if err != nil {
		return err
	}
	if len(dst) != t.NumElements() {
		return errors.Errorf("gguf.DecodeInto: tensor %s has %d elements, destination %d", t, t.NumElements(), len(dst))
	}
	if !t.Type.CanDecode() {
		return errors.Wrapf(ErrUnsupported, "gguf.DecodeInto: tensor %s; decodable types: %s", t, decodableNames)
	}
	bs, bb := t.Type.BlockSize(), t.Type.BlockBytes()
	blocksPerChunk := max(1, decodeChunk/bb)
	buf := make([]byte, min(int64(blocksPerChunk*bb), t.Bytes))
	nBlocks := len(dst) / bs
	for b := 0; b < nBlocks; b += blocksPerChunk {
		n := min(blocksPerChunk, nBlocks-b)
		chunk := buf[:n*bb]
		off := t.Offset + int64(b)*int64(bb)
		if err := readAt(f.r, chunk, off); err != nil {
			return errors.WithMessagef(err, "gguf.DecodeInto: tensor %s: reading %d bytes at offset %d", t, len(chunk), off)
		}
		// The scales are checked while the chunk is at hand: a NaN or infinite one would decode to
		// NaN or infinite values silently.
		if blk, at := firstNonFiniteScale(t.Type, chunk); blk >= 0 {
			return errors.WithMessagef(scaleError(t.Type, chunk[blk*bb:(blk+1)*bb], b+blk, at), "gguf.DecodeInto: tensor %s", t)
		}
		if err := Decode(t.Type, chunk, dst[b*bs:(b+n)*bs]); err != nil {
			return errors.WithMessagef(err, "gguf.DecodeInto: tensor %s", t)
		}
		if nonFiniteFloats(t.Type, chunk) { // F32, F16 and BF16 decode exactly: find the value
			for i, v := range dst[b*bs : (b+n)*bs] {
				if v-v != 0 {
					return errors.Wrapf(ErrCorrupt, "gguf.DecodeInto: tensor %s: element %d is %v; accepted: finite values",
						t, b*bs+i, v)
				}
			}
		}
	}
	return nil
}

// GGUF metadata value types.
const (
	vtUint8   = 0
	vtInt8    = 1
	vtUint16  = 2
	vtInt16   = 3
	vtUint32  = 4
	vtInt32   = 5
	vtFloat32 = 6
	vtBool    = 7
	vtString  = 8
	vtArray   = 9
	vtUint64  = 10
	vtInt64   = 11
	vtFloat64 = 12
)

// minValueBytes is the smallest encoding of a value of each type, to bound array lengths.
var minValueBytes = map[uint32]int64{
	vtUint8: 1, vtInt8: 1, vtUint16: 2, vtInt16: 2, vtUint32: 4, vtInt32: 4, vtFloat32: 4, vtBool: 1,
	vtString: 8, vtArray: 12, vtUint64: 8, vtInt64: 8, vtFloat64: 8,
}

// probeBytes is the span of a string or array above which the parser checks that the reader
// holds it before allocating for it (smaller ones are allocated, then read).
const probeBytes = 64 << 10

// parser reads the header sequentially, knowing how many bytes remain, so that no length read
// from the file can cause an allocation larger than the file.
type parser struct {
	r    io.ReaderAt
	br   *bufio.Reader
	pos  int64
	size int64
	buf  [8]byte
}

func (p *parser) corrupt(format string, args ...any) error {
	return errors.Wrapf(ErrCorrupt, format, args...)
}

// read fills b, or reports the truncation naming what was being read.
func (p *parser) read(b []byte, what string) error {
	if int64(len(b)) > p.size-p.pos {
		return p.corrupt("truncated: %s needs %d bytes at offset %d, the file has %d", what, len(b), p.pos, p.size)
	}
	if _, err := io.ReadFull(p.br, b); err != nil {
		return p.corrupt("reading %s at offset %d: %v", what, p.pos, err)
	}
	p.pos += int64(len(b))
	return nil
}

func (p *parser) u32(what string) (uint32, error) {
	if err := p.read(p.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *parser) u64(what string) (uint64, error) {
	if err := p.read(p.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p.buf[:8]), nil
}

// count reads a uint64 element count and checks that count elements of at least minBytes each
// fit in the rest of the file and, past probeBytes, that the reader holds them: the size given
// to Read may be larger than the content.
func (p *parser) count(what string, minBytes int64) (int, error) {
	n, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if remaining := p.size - p.pos; n > uint64(remaining/minBytes) {
		return 0, p.corrupt("%s is %d at offset %d, but only %d bytes remain", what, n, p.pos-8, remaining)
	}
	if span := int64(n) * minBytes; span > probeBytes {
		if k, err := p.r.ReadAt(p.buf[:1], p.pos+span-1); k != 1 {
			return 0, p.corrupt("truncated: %s is %d at offset %d, which needs %d bytes, but reading offset %d failed: %v",
				what, n, p.pos-8, span, p.pos+span-1, err)
		}
	}
	return int(n), nil
}

func (p *parser) str(what string) (string, error) {
	n, err := p.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	if err := p.read(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

func (p *parser) header(f *File) error {
	magic := make([]byte, 4)
	if err := p.read(magic, "magic"); err != nil {
		return err
	}
	if string(magic) != Magic {
		return p.corrupt("magic %q; accepted: %q", magic, Magic)
	}
	version, err := p.u32("version")
	if err != nil {
		return err
	}
	if version != 2 && version != 3 {
		if version&0xFFFF == 0 && version != 0 {
			return errors.Wrapf(ErrUnsupported, "gguf: version %d reads as a big-endian file; accepted: little-endian GGUF v2, v3", version)
		}
		return errors.Wrapf(ErrUnsupported, "gguf: version %d; accepted: 2, 3", version)
	}
	f.Version = version
	// A tensor info is at least 24 bytes (name length, ndims, type, offset); a key/value at least 13.
	nTensors, err := p.count("tensor count", 24)
	if err != nil {
		return err
	}
	nKV, err := p.count("metadata count", 13)
	if err != nil {
		return err
	}
	for i := 0; i < nKV; i++ {
		key, err := p.str(fmt.Sprintf("metadata key #%d", i))
		if err != nil {
			return err
		}
		if _, dup := f.meta[key]; dup {
			return p.corrupt("metadata key %q appears twice", key)
		}
		vt, err := p.u32(fmt.Sprintf("type of metadata %q", key))
		if err != nil {
			return err
		}
		v, err := p.value(vt, key, 0)
		if err != nil {
			return err
		}
		f.keys = append(f.keys, key)
		f.meta[key] = v
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.meta["general.alignment"]; ok {
		a, isU32 := v.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return p.corrupt("general.alignment is %v (%T); accepted: a power of two as uint32", v, v)
		}
		f.Alignment = int(a)
	}

	for i := 0; i < nTensors; i++ {
		t, err := p.tensorInfo(i)
		if err != nil {
			return err
		}
		if _, dup := f.byName[t.Name]; dup {
			return p.corrupt("tensor %q appears twice", t.Name)
		}
		f.tensors = append(f.tensors, t)
		f.byName[t.Name] = t
	}
	align := int64(f.Alignment)
	f.DataOffset = (p.pos + align - 1) / align * align
	// Without tensors the data section is empty and its padding may be missing, as in llama.cpp's
	// vocabulary-only files, which end with the directory.
	if f.DataOffset > f.Size && len(f.tensors) > 0 {
		return p.corrupt("truncated: the data section starts at %d, the file has %d bytes", f.DataOffset, f.Size)
	}
	return f.placeTensors()
}

// placeTensors turns relative offsets into absolute ones and checks them: aligned, inside the
// file, not overlapping.
func (f *File) placeTensors() error {
	dataBytes := f.Size - f.DataOffset
	for _, t := range f.tensors {
		rel := t.Offset
		if rel%int64(f.Alignment) != 0 {
			return errors.Wrapf(ErrCorrupt, "gguf: tensor %s: offset %d is not a multiple of the alignment %d", t, rel, f.Alignment)
		}
		if rel > dataBytes || t.Bytes > dataBytes-rel {
			return errors.Wrapf(ErrCorrupt, "gguf: truncated: tensor %s needs bytes [%d, %d) of the data section, which has %d",
				t, rel, rel+t.Bytes, dataBytes)
		}
		t.Offset = f.DataOffset + rel
	}
	// Sorted by start, then end: an empty tensor at the offset where another starts comes first
	// and overlaps nothing.
	sorted := append([]*Tensor(nil), f.tensors...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		return a.Offset < b.Offset || (a.Offset == b.Offset && a.Bytes < b.Bytes)
	})
	for i := 1; i < len(sorted); i++ {
		prev, t := sorted[i-1], sorted[i]
		if prev.Offset+prev.Bytes > t.Offset {
			return errors.Wrapf(ErrCorrupt, "gguf: tensors %s and %s overlap", prev, t)
		}
	}
	return nil
}

func (p *parser) tensorInfo(i int) (*Tensor, error) {
	name, err := p.str(fmt.Sprintf("name of tensor #%d", i))
	if err != nil {
		return nil, err
	}
	nDims, err := p.u32(fmt.Sprintf("dimension count of tensor %q", name))
	if err != nil {
		return nil, err
	}
	if nDims > maxDims {
		return nil, p.corrupt("tensor %q has %d dimensions; accepted: at most %d", name, nDims, maxDims)
	}
	t := &Tensor{Name: name, Dims: make([]int, nDims)}
	dims := make([]uint64, nDims)
	for d := range dims {
		if dims[d], err = p.u64(fmt.Sprintf("dimension %d of tensor %q", d, name)); err != nil {
			return nil, err
		}
		t.Dims[d] = int(dims[d])
	}
	// The element count is bounded so that no product overflows: a tensor can't hold more
	// elements than 256 (the largest block size) per byte of the file (any count, where 256 per
	// byte overflows: Elements bounds it by math.MaxInt64 anyway).
	limit := uint64(math.MaxUint64)
	if uint64(p.size) <= limit/256 {
		limit = uint64(p.size) * 256
	}
	elements, ok := fileio.Elements(dims, limit)
	if !ok {
		return nil, p.corrupt("tensor %q: dimensions %v, more elements than the file can hold", name, dims)
	}
	typ, err := p.u32(fmt.Sprintf("type of tensor %q", name))
	if err != nil {
		return nil, err
	}
	t.Type = Type(typ)
	if !t.Type.Known() {
		return nil, errors.Wrapf(ErrUnsupported, "gguf: tensor %q has GGML type %d, whose size this reader does not know", name, typ)
	}
	off, err := p.u64(fmt.Sprintf("offset of tensor %q", name))
	if err != nil {
		return nil, err
	}
	if off > uint64(p.size) {
		return nil, p.corrupt("tensor %q: offset %d is past the end of the file (%d bytes)", name, off, p.size)
	}
	t.Offset = int64(off)
	// A scalar (no dimensions) has one element, its first dimension 1 as llama.cpp reads it: of a
	// block type, a partial block (else it would hold one element in zero bytes).
	bs, first := t.Type.BlockSize(), 1
	if len(t.Dims) > 0 {
		first = t.Dims[0]
	}
	if first%bs != 0 {
		return nil, p.corrupt("tensor %s: the first dimension %d is not a multiple of the %s block size %d", t, first, t.Type, bs)
	}
	// Bounded by the size given, so that the product can't overflow whatever size the caller
	// gives Read.
	blocks, bb := elements/uint64(bs), uint64(t.Type.BlockBytes())
	if blocks > uint64(p.size)/bb {
		return nil, p.corrupt("truncated: tensor %s needs %d blocks of %d bytes, more than the file's %d bytes", t, blocks, bb, p.size)
	}
	t.Bytes = int64(blocks * bb)
	return t, nil
}

// value reads one metadata value of type vt.
func (p *parser) value(vt uint32, key string, depth int) (any, error) {
	what := fmt.Sprintf("metadata %q", key)
	switch vt {
	case vtUint8, vtInt8, vtBool:
		if err := p.read(p.buf[:1], what); err != nil {
			return nil, err
		}
		switch vt {
		case vtUint8:
			return p.buf[0], nil
		case vtInt8:
			return int8(p.buf[0]), nil
		}
		if p.buf[0] > 1 {
			return nil, p.corrupt("%s: bool byte %d; accepted: 0 or 1", what, p.buf[0])
		}
		return p.buf[0] == 1, nil
	case vtUint16, vtInt16:
		if err := p.read(p.buf[:2], what); err != nil {
			return nil, err
		}
		u := binary.LittleEndian.Uint16(p.buf[:2])
		if vt == vtInt16 {
			return int16(u), nil
		}
		return u, nil
	case vtUint32, vtInt32, vtFloat32:
		u, err := p.u32(what)
		if err != nil {
			return nil, err
		}
		switch vt {
		case vtInt32:
			return int32(u), nil
		case vtFloat32:
			return math.Float32frombits(u), nil
		}
		return u, nil
	case vtUint64, vtInt64, vtFloat64:
		u, err := p.u64(what)
		if err != nil {
			return nil, err
		}
		switch vt {
		case vtInt64:
			return int64(u), nil
		case vtFloat64:
			return math.Float64frombits(u), nil
		}
		return u, nil
	case vtString:
		return p.str(what)
	case vtArray:
		if depth >= maxArrayDepth {
			return nil, p.corrupt("%s: arrays nested deeper than %d", what, maxArrayDepth)
		}
		et, err := p.u32(what + " element type")
		if err != nil {
			return nil, err
		}
		minBytes, ok := minValueBytes[et]
		if !ok {
			return nil, p.corrupt("%s: array element type %d; accepted: 0..12", what, et)
		}
		n, err := p.count(what+" array length", minBytes)
		if err != nil {
			return nil, err
		}
		return p.array(et, n, key, depth)
	}
	return nil, p.corrupt("metadata %q: value type %d; accepted: 0..12", key, vt)
}

// array reads n values of type et into a typed slice ([]any for arrays of arrays).
func (p *parser) array(et uint32, n int, key string, depth int) (any, error) {
	switch et {
	case vtUint8:
		return readArray[uint8](p, et, n, key, depth)
	case vtInt8:
		return readArray[int8](p, et, n, key, depth)
	case vtUint16:
		return readArray[uint16](p, et, n, key, depth)
	case vtInt16:
		return readArray[int16](p, et, n, key, depth)
	case vtUint32:
		return readArray[uint32](p, et, n, key, depth)
	case vtInt32:
		return readArray[int32](p, et, n, key, depth)
	case vtFloat32:
		return readArray[float32](p, et, n, key, depth)
	case vtBool:
		return readArray[bool](p, et, n, key, depth)
	case vtString:
		return readArray[string](p, et, n, key, depth)
	case vtUint64:
		return readArray[uint64](p, et, n, key, depth)
	case vtInt64:
		return readArray[int64](p, et, n, key, depth)
	case vtFloat64:
		return readArray[float64](p, et, n, key, depth)
	}
	return readArray[any](p, et, n, key, depth)
}

func readArray[T any](p *parser, et uint32, n int, key string, depth int) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		v, err := p.value(et, key, depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = v.(T)
	}
	return out, nil
}
