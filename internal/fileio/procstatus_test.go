package fileio

import (
	"strings"
	"testing"
)

// TestProcStatusField: the kB figures of a /proc/self/status text, in bytes, and the errors of a
// missing or malformed field.
func TestProcStatusField(t *testing.T) {
	const status = "Name:\tgo\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1536 kB\nVmData:\tlots kB\n"
	for _, tc := range []struct {
		field string
		want  int64
		fails bool
	}{
		{"VmHWM", 2048 << 10, false},
		{"VmRSS", 1536 << 10, false},
		{"VmPeak", 100 << 10, false},
		{"VmData", 0, true},
		{"VmSwap", 0, true},
	} {
		got, err := procStatusField(strings.NewReader(status), tc.field)
		if (err != nil) != tc.fails || got != tc.want {
			t.Errorf("%s: %d, %v; want %d (error: %v)", tc.field, got, err, tc.want, tc.fails)
		}
	}
}
