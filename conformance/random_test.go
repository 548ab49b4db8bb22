package conformance

import (
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
)

// TestRandomSample runs the committed sample of randomized cases (testdata-random, written by
// `conformance/run.sh random-sample`): every case must be bit-identical to eformer or fall in a
// documented class (deliberate difference or eformer artifact, see README.md), and the graph
// quantizers must give the host quantizers' bytes. `make conformance-random` runs thousands.
func TestRandomSample(t *testing.T) {
	backend := testutil.Backend(t)
	s, err := CheckRandomDir(randomSampleDir, backend, runtime.IsGo(backend))
	if err != nil {
		t.Fatalf("%+v", err)
	}
	var report strings.Builder
	s.Report(&report)
	t.Log(report.String())
	if s.NumBugs > 0 {
		t.Errorf("%d of %d randomized cases differ from eformer without a documented reason:\n  %s",
			s.NumBugs, s.Cases, strings.Join(s.Bugs, "\n  "))
	}
	// The sample must exercise every format and dtype, and the graph quantizers.
	for _, kind := range []string{"nf4", "int8", "binary", "ternary"} {
		for _, dtype := range []string{"float32", "bfloat16", "float16"} {
			if s.Counts[kind+"/"+dtype+"/"+string(ClassIdentical)] == 0 {
				t.Errorf("no identical %s %s case in the sample", kind, dtype)
			}
		}
	}
	if s.Graph["identical"] == 0 {
		t.Error("no graph quantizer was compared with the host one")
	}
}
