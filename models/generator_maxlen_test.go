package models_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
)

// TestGeneratorMaxLenUnknownContext: a decoder of unknown context length (a GGUF file without
// context_length) and a huge MaxLen (quanta run -maxlen) must be an error naming MaxLen, not a
// loop whose window doubling overflows int and appends windows until the process is killed.
func TestGeneratorMaxLenUnknownContext(t *testing.T) {
	backend := testutil.Backend(t)
	d := sumDecoder{vocab: 11} // ContextLength 0: unknown
	for _, maxLen := range []int{math.MaxInt, 1 << 62, 1 << 40} {
		done := make(chan error, 1)
		go func() {
			gen, err := models.NewGenerator(backend, context.New(), d, models.GeneratorOptions{MaxLen: maxLen})
			if err == nil {
				gen.Finalize()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "MaxLen") {
				t.Errorf("MaxLen %d with an unknown context length: error %v; want one naming MaxLen", maxLen, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("MaxLen %d with an unknown context length: NewGenerator still running after 3s (window doubling overflows)", maxLen)
		}
	}
}
