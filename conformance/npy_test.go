package conformance

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// npyBytes builds a version-1.0 .npy file with the given header dict and payload.
func npyBytes(header string, payload []byte) []byte {
	// numpy pads the header with spaces to a multiple of 64 bytes, ending with '\n'.
	total := len(npyMagic) + 2 + 2 + len(header) + 1
	pad := (64 - total%64) % 64
	h := header + strings.Repeat(" ", pad) + "\n"
	out := append([]byte{}, npyMagic...)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	out = append(out, h...)
	return append(out, payload...)
}

func TestReadNPY(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		payload []byte
		descr   string
		dims    []int
		err     string
	}{
		{"f4 2x2", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", make([]byte, 16), "<f4", []int{2, 2}, ""},
		{"u1 vector", "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", []byte{1, 2, 3}, "|u1", []int{3}, ""},
		{"scalar", "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", []byte{7, 0, 0, 0}, "<i4", []int{}, ""},
		{"bool", "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", []byte{0, 1}, "|b1", []int{2}, ""},
		{"fortran", "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", make([]byte, 4), "", nil, "fortran_order"},
		{"big endian", "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", make([]byte, 4), "", nil, "descriptor"},
		{"short data", "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", make([]byte, 4), "", nil, "data bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			arr, err := readNPY(npyBytes(tc.header, tc.payload))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ReadNPY: got error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadNPY: %+v", err)
			}
			if arr.Descr != tc.descr || !slices.Equal(arr.Dims, tc.dims) || !slices.Equal(arr.Data, tc.payload) {
				t.Errorf("ReadNPY = %q %v %v, want %q %v %v", arr.Descr, arr.Dims, arr.Data, tc.descr, tc.dims, tc.payload)
			}
		})
	}
	if _, err := readNPY([]byte("not numpy")); err == nil {
		t.Error("ReadNPY accepted a file without the magic")
	}
}

// TestLoadEveryVector loads every array of the index and checks it against its entry.
func TestLoadEveryVector(t *testing.T) {
	idx, err := LoadIndex("testdata")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	total := 0
	for _, n := range idx.Counts {
		total += n
	}
	if total != len(idx.Cases) {
		t.Errorf("index counts sum to %d, but it holds %d cases", total, len(idx.Cases))
	}
	files := 0
	for i := range idx.Cases {
		c := &idx.Cases[i]
		for role, refs := range map[string]map[string]arrayRef{"input": c.Inputs, "output": c.Outputs} {
			for name, ref := range refs {
				tensor, err := idx.load(c, role, refs, name)
				if err != nil {
					t.Errorf("%+v", err)
					continue
				}
				want, _ := dtypeOf(ref.DType)
				if tensor.DType() != want || !slices.Equal(tensor.Shape().Dimensions, ref.Shape) {
					t.Errorf("case %s %s %q: loaded %s, want %s%v", c.ID, role, name, tensor.Shape(), want, ref.Shape)
				}
				files++
			}
		}
	}
	if files == 0 {
		t.Fatal("no vectors loaded")
	}
	t.Logf("%d cases, %d arrays loaded (eformer %s, jax %s)", len(idx.Cases), files, idx.Versions["eformer"], idx.Versions["jax"])
}
