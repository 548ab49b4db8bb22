package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestCheckFlags: a size below 1 or an unknown format is an error naming its flag before the input
// is built (a negative -rows panicked inside shapes.Make; an unknown -format was reported after
// the default 256 MiB input was built and filled), and an argument is refused (-format's value
// given as one was ignored, the default nf4 measured).
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		format     string
		rows, cols int
		want       string
	}{
		{"nf4", -1, 8, "-rows -1; accepted: >= 1"},
		{"nf4", 0, 8, "-rows 0; accepted: >= 1"},
		{"int8", 8, -2, "-cols -2; accepted: >= 1"},
		{"bogus", 8, 8, `-format "bogus"; accepted: nf4, int8, binary, ternary`},
		{"ternary", 1, 1, ""},
	} {
		args := []string{"-format", tc.format, "-rows", strconv.Itoa(tc.rows), "-cols", strconv.Itoa(tc.cols)}
		t.Run(strings.Join(args, " "), func(t *testing.T) { testutil.CheckFlags(t, checkFlags, tc.want, args...) })
	}
	testutil.ArgumentRefused(t, checkFlags)
}
