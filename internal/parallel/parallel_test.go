package parallel_test

import (
	"sync/atomic"
	"testing"

	"github.com/quanta-ml/quanta/internal/parallel"
)

// TestChunks checks that the chunks cover [0, n) once, whatever the worker count.
func TestChunks(t *testing.T) {
	for _, n := range []int{0, 1, 7, 64, 1000} {
		for _, workers := range []int{0, 1, 3, 8, 2000} {
			seen := make([]atomic.Int32, n)
			parallel.Chunks(n, workers, func(from, to int) {
				for i := from; i < to; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				if c := seen[i].Load(); c != 1 {
					t.Fatalf("n=%d workers=%d: index %d visited %d times, want 1", n, workers, i, c)
				}
			}
		}
	}
}
