// Package parallel splits host loops (the quantizers', the benchmarks' weights) over goroutines.
package parallel

import (
	"runtime"
	"sync"
)

// Chunks runs fn over [0, n) split in contiguous chunks across up to workers goroutines, and
// returns when every chunk is done. With workers <= 1, fn(0, n) runs on the calling goroutine.
func Chunks(n, workers int, fn func(from, to int)) {
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for from := 0; from < n; from += chunk {
		wg.Add(1)
		go func(from, to int) {
			defer wg.Done()
			fn(from, to)
		}(from, min(from+chunk, n))
	}
	wg.Wait()
}

// Workers is the number of goroutines for n independent items of which each goroutine should get
// at least minPerWorker: one for small inputs, at most GOMAXPROCS.
func Workers(n, minPerWorker int) int {
	return max(1, min(runtime.GOMAXPROCS(0), n/max(1, minPerWorker)))
}
