package conformance

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"strings"

	"github.com/pkg/errors"
)

// NPY is the content of a .npy file: the numpy dtype descriptor, the dimensions and the raw
// little-endian element bytes in C (row-major) order.
type NPY struct {
	// Descr is the numpy dtype descriptor, e.g. "<f4" or "|u1".
	Descr string
	// Dims are the array's dimensions (empty for a 0-d array).
	Dims []int
	// Data holds the elements, len(Data) == ElementSize(Descr) * product(Dims).
	Data []byte
}

// npyMagic opens every .npy file.
var npyMagic = []byte("\x93NUMPY")

// npyElementSizes lists the descriptors ReadNPYFile accepts and their element sizes in bytes.
var npyElementSizes = map[string]int{
	"<f8": 8, "<f4": 4, "<f2": 2,
	"|u1": 1, "|i1": 1, "<u2": 2, "<i4": 4, "|b1": 1,
}

// ReadNPYFile reads a .npy file: format versions 1.0, 2.0 and 3.0, a C-order array with one of
// the descriptors '<f8', '<f4', '<f2', '|u1', '|i1', '<u2', '<i4', '|b1'. Fortran order, big-endian
// data, structured and object dtypes are errors.
func ReadNPYFile(path string) (*NPY, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.Wrap(err, "conformance.ReadNPYFile")
	}
	arr, err := readNPY(data)
	if err != nil {
		return nil, errors.WithMessagef(err, "reading %s", path)
	}
	return arr, nil
}

// readNPY parses a .npy file (format versions 1.0, 2.0 and 3.0) holding a C-order array with
// one of the descriptors '<f8', '<f4', '<f2', '|u1', '|i1', '<u2', '<i4', '|b1'. Fortran order,
// big-endian data, structured and object dtypes are errors.
func readNPY(data []byte) (*NPY, error) {
	if !bytes.HasPrefix(data, npyMagic) || len(data) < len(npyMagic)+2 {
		return nil, errors.New("conformance.ReadNPY: not a .npy file (bad magic)")
	}
	major := data[len(npyMagic)]
	rest := data[len(npyMagic)+2:]
	var headerLen int
	switch major {
	case 1:
		if len(rest) < 2 {
			return nil, errors.New("conformance.ReadNPY: truncated header length")
		}
		headerLen, rest = int(binary.LittleEndian.Uint16(rest)), rest[2:]
	case 2, 3:
		if len(rest) < 4 {
			return nil, errors.New("conformance.ReadNPY: truncated header length")
		}
		headerLen, rest = int(binary.LittleEndian.Uint32(rest)), rest[4:]
	default:
		return nil, errors.Errorf("conformance.ReadNPY: format version %d; accepted: 1, 2, 3", major)
	}
	if len(rest) < headerLen {
		return nil, errors.Errorf("conformance.ReadNPY: header of %d bytes, only %d present", headerLen, len(rest))
	}
	header, payload := string(rest[:headerLen]), rest[headerLen:]
	fields, err := parseNPYHeader(header)
	if err != nil {
		return nil, err
	}
	arr := &NPY{}
	descr, ok := fields["descr"]
	if !ok {
		return nil, errors.Errorf("conformance.ReadNPY: header %q has no 'descr'", header)
	}
	arr.Descr, err = unquote(descr)
	if err != nil {
		return nil, errors.WithMessage(err, "conformance.ReadNPY: 'descr'")
	}
	size, ok := npyElementSizes[arr.Descr]
	if !ok {
		return nil, errors.Errorf("conformance.ReadNPY: dtype descriptor %q; accepted: '<f8', '<f4', '<f2', '|u1', '|i1', '<u2', '<i4', '|b1'",
			arr.Descr)
	}
	if order := fields["fortran_order"]; order != "False" {
		return nil, errors.Errorf("conformance.ReadNPY: fortran_order %q; only C order (False) is accepted", order)
	}
	shape, ok := fields["shape"]
	if !ok {
		return nil, errors.Errorf("conformance.ReadNPY: header %q has no 'shape'", header)
	}
	if arr.Dims, err = parseShapeTuple(shape); err != nil {
		return nil, err
	}
	n := size
	for _, d := range arr.Dims {
		n *= d
	}
	if len(payload) != n {
		return nil, errors.Errorf("conformance.ReadNPY: %d data bytes for %s%v, want %d", len(payload), arr.Descr, arr.Dims, n)
	}
	arr.Data = payload
	return arr, nil
}

// parseNPYHeader splits the header's Python dict literal {'key': value, ...} into raw values.
// Values are strings ('...'), booleans or tuples; that is all numpy writes.
func parseNPYHeader(header string) (map[string]string, error) {
	s := strings.TrimSpace(header)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, errors.Errorf("conformance.ReadNPY: header %q is not a dict literal", header)
	}
	s = s[1 : len(s)-1]
	fields := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,\t\n")
		if s == "" {
			return fields, nil
		}
		key, after, err := readQuoted(s)
		if err != nil {
			return nil, errors.WithMessagef(err, "conformance.ReadNPY: header %q", header)
		}
		after = strings.TrimLeft(after, " ")
		if !strings.HasPrefix(after, ":") {
			return nil, errors.Errorf("conformance.ReadNPY: header %q: missing ':' after %q", header, key)
		}
		after = strings.TrimLeft(after[1:], " ")
		var end int
		switch {
		case strings.HasPrefix(after, "'"), strings.HasPrefix(after, `"`):
			_, tail, err := readQuoted(after)
			if err != nil {
				return nil, errors.WithMessagef(err, "conformance.ReadNPY: header %q", header)
			}
			end = len(after) - len(tail)
		case strings.HasPrefix(after, "("):
			end = strings.IndexByte(after, ')') + 1
			if end == 0 {
				return nil, errors.Errorf("conformance.ReadNPY: header %q: unterminated tuple", header)
			}
		default:
			end = strings.IndexAny(after, ",}")
			if end < 0 {
				end = len(after)
			}
		}
		fields[key] = strings.TrimSpace(after[:end])
		s = after[end:]
	}
}

// readQuoted reads a Python string literal at the start of s and returns its content and the rest.
func readQuoted(s string) (string, string, error) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", "", errors.Errorf("expected a quoted string at %q", s)
	}
	end := strings.IndexByte(s[1:], s[0])
	if end < 0 {
		return "", "", errors.Errorf("unterminated string at %q", s)
	}
	return s[1 : end+1], s[end+2:], nil
}

func unquote(v string) (string, error) {
	content, rest, err := readQuoted(v)
	if err != nil {
		return "", err
	}
	if rest != "" {
		return "", errors.Errorf("trailing %q after the string", rest)
	}
	return content, nil
}

// parseShapeTuple reads "(2, 3)", "(4,)" or "()".
func parseShapeTuple(v string) ([]int, error) {
	if !strings.HasPrefix(v, "(") || !strings.HasSuffix(v, ")") {
		return nil, errors.Errorf("conformance.ReadNPY: shape %q is not a tuple", v)
	}
	dims := []int{}
	for _, part := range strings.Split(v[1:len(v)-1], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, err := strconv.Atoi(part)
		if err != nil || d < 0 {
			return nil, errors.Errorf("conformance.ReadNPY: shape %q: bad dimension %q", v, part)
		}
		dims = append(dims, d)
	}
	return dims, nil
}
