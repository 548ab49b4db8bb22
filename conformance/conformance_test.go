package conformance

import (
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// checks maps a case kind to the function that checks quanta against it.
var checks = map[string]func(s *suite, t *testing.T, c *Case){
	"nf4":     checkNF4,
	"int8":    checkInt8,
	"onebit":  checkOneBit,
	"binary":  checkBinaryTernary,
	"ternary": checkBinaryTernary,
	"ste":     checkSTE,
	"matmul":  checkMatMul,
	"error":   checkError,
}

// TestConformance runs every case of testdata/index.json, one subtest per case, and logs a
// summary: cases run, byte-identical component comparisons, the largest NF4 difference between
// eformer's polynomial decode and the exact codebook, and the deliberate differences observed.
func TestConformance(t *testing.T) {
	idx, err := LoadIndex("testdata")
	if err != nil {
		t.Fatalf("%+v", err)
	}
	s := &suite{idx: idx, backend: testutil.Backend(t), sum: newSummary()}
	for i := range idx.Cases {
		c := &idx.Cases[i]
		check, ok := checks[c.Kind]
		if !ok {
			t.Errorf("case %s: unknown kind %q", c.ID, c.Kind)
			continue
		}
		s.sum.casesByKind[c.Kind]++
		t.Run(c.ID, func(t *testing.T) { check(s, t, c) })
	}
	for kind, n := range idx.Counts {
		if s.sum.casesByKind[kind] != n {
			t.Errorf("kind %s: ran %d cases, the index counts %d", kind, s.sum.casesByKind[kind], n)
		}
	}
	s.sum.report(t, idx)
}
