// Package benchflags holds the flag vocabulary the benchmark commands share (bench and
// conformance/peer): lists of activation rows and weight shapes, so both parse them one way.
package benchflags

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultRows is the default list of activation rows M: decode (1), small batches, prefill.
const DefaultRows = "1,4,16,64,256"

// Shape is a weight's dimensions (K, N): x (M, K) · W (K, N).
type Shape struct{ K, N int }

// String returns "KxN".
func (s Shape) String() string { return fmt.Sprintf("%dx%d", s.K, s.N) }

// Transposed returns (N, K).
func (s Shape) Transposed() Shape { return Shape{s.N, s.K} }

// ParseInts reads a comma-separated list of positive integers.
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad list %q: want comma-separated positive integers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseShapes reads a comma-separated list of shapes "KxN".
func ParseShapes(s string) ([]Shape, error) {
	var out []Shape
	for _, part := range strings.Split(s, ",") {
		k, n, ok := strings.Cut(strings.TrimSpace(part), "x")
		dims, err := ParseInts(k + "," + n)
		if !ok || err != nil || len(dims) != 2 {
			return nil, fmt.Errorf("bad shape %q in %q: want KxN with positive K and N, e.g. 4096x11008", part, s)
		}
		out = append(out, Shape{dims[0], dims[1]})
	}
	return out, nil
}
