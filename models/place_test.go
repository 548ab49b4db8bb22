package models_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/internal/hugepages"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// TestPlace places a weight larger than a huge page: its values are those given, whether or not
// the host backed it with huge pages, and an invalid QUANTA_HUGE_PAGES is refused by name.
func TestPlace(t *testing.T) {
	backend := testutil.Backend(t)
	values := make([]float32, 3*hugepages.Size/4)
	for i := range values {
		values[i] = float32(i%977) - 488.5
	}
	for _, setting := range []string{"", "0"} {
		t.Setenv(hugepages.Env, setting)
		w := tensors.FromFlatDataAndDimensions(append([]float32(nil), values...), len(values)/1024, 1024)
		if err := models.Place(backend, []models.Variable{{Scope: "/dense", Name: "weights", Value: w}}); err != nil {
			t.Fatalf("%s=%q: Place: %v", hugepages.Env, setting, err)
		}
		got := tensors.MustCopyFlatData[float32](w)
		for i := range got {
			if got[i] != values[i] {
				t.Fatalf("%s=%q: element %d is %g after Place; want %g", hugepages.Env, setting, i, got[i], values[i])
			}
		}
		_ = w.FinalizeAll()
	}
	t.Setenv(hugepages.Env, "sometimes")
	w := tensors.FromFlatDataAndDimensions([]float32{1, 2}, 2)
	err := models.Place(backend, []models.Variable{{Scope: "/dense", Name: "weights", Value: w}})
	if err == nil || !strings.Contains(err.Error(), hugepages.Env) {
		t.Fatalf("Place with %s=sometimes: error %v; want one naming %s", hugepages.Env, err, hugepages.Env)
	}
}
