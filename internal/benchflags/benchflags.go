// Package benchflags holds the flag vocabulary the benchmark commands share (bench and
// conformance/peer): lists of activation rows and weight shapes, so both parse them one way.
package benchflags

import (
	"fmt"
	"slices"
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

// ParseInts reads a comma-separated list of distinct positive integers (a value listed twice would
// be measured twice, the tables showing one of the two).
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		v, ok := positive(part)
		if !ok {
			return nil, fmt.Errorf("bad list %q: want comma-separated positive integers", s)
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("bad list %q: %d listed twice", s, v)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseShapes reads a comma-separated list of distinct shapes "KxN".
func ParseShapes(s string) ([]Shape, error) {
	var out []Shape
	for _, part := range strings.Split(s, ",") {
		k, n, found := strings.Cut(strings.TrimSpace(part), "x")
		dk, okK := positive(k)
		dn, okN := positive(n)
		if !found || !okK || !okN {
			return nil, fmt.Errorf("bad shape %q in %q: want KxN with positive K and N, e.g. 4096x11008", part, s)
		}
		shape := Shape{dk, dn}
		if slices.Contains(out, shape) {
			return nil, fmt.Errorf("bad list %q: %s listed twice", s, shape)
		}
		out = append(out, shape)
	}
	return out, nil
}

// positive parses one positive integer (spaces around it allowed).
func positive(s string) (int, bool) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	return v, err == nil && v > 0
}
