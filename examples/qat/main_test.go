package main

import (
	"strings"
	"testing"
)

// TestHiddenOutOfRange: a width below 1 is an error naming -hidden, not a shape error from deep
// inside GoMLX's first training step.
func TestHiddenOutOfRange(t *testing.T) {
	for _, hidden := range []int{0, -1} {
		saved := *flagHidden
		*flagHidden = hidden
		err := run()
		*flagHidden = saved
		if err == nil || !strings.Contains(err.Error(), "-hidden") {
			t.Errorf("-hidden %d: run() = %v; want an error naming -hidden", hidden, err)
		}
	}
}

// TestHiddenNotPackable: binary and ternary need a width that is a multiple of 4 (their kernels
// pack 4 input rows a byte); run says so naming -hidden before training, not after the float
// training when the conversion of the first quantized kernel fails.
func TestHiddenNotPackable(t *testing.T) {
	savedHidden, savedTypes, savedQuick := *flagHidden, *flagTypes, *flagQuick
	defer func() { *flagHidden, *flagTypes, *flagQuick = savedHidden, savedTypes, savedQuick }()
	*flagHidden, *flagTypes, *flagQuick = 6, "binary", true
	if err := run(); err == nil || !strings.Contains(err.Error(), "-hidden") {
		t.Errorf("-hidden 6 -types binary: run() = %v; want an error naming -hidden", err)
	}
}
