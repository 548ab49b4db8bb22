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
