// Command randomrun checks quanta's quantizers against a randomized run of eformer
// (conformance/gen_random.py's output): it streams the cases of -dir one at a time, quantizes
// each input with quanta's host and graph quantizers on the backend GOMLX_BACKEND selects,
// compares every component bit for bit with eformer's, classifies each difference (see
// conformance.Class) and prints the counts per format, dtype and class. It exits with status 1 if
// any case is a quanta bug. `make conformance-random` generates the run and calls it.
//
//	go run ./conformance/randomrun -dir /tmp/random [-json summary.json]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/quanta-ml/quanta/conformance"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/runtime"
)

func main() {
	dir := flag.String("dir", "", "folder written by conformance/gen_random.py (cases.jsonl, arrays.bin)")
	jsonOut := flag.String("json", "", "also write the summary as JSON to this file")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "randomrun: -dir is required")
		os.Exit(2)
	}
	backend, err := runtime.Backend()
	if err != nil {
		fmt.Fprintf(os.Stderr, "randomrun: %+v\n", err)
		os.Exit(2)
	}
	fmt.Printf("randomrun: backend %s\n", backend.Description())
	s, err := conformance.CheckRandomDir(*dir, backend, runtime.IsGo(backend))
	if s != nil {
		s.Report(os.Stdout)
		if *jsonOut != "" {
			if werr := writeSummary(*jsonOut, s); werr != nil {
				fmt.Fprintf(os.Stderr, "randomrun: %v\n", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "randomrun: %+v\n", err)
		os.Exit(2)
	}
	if s.NumBugs > 0 {
		fmt.Fprintf(os.Stderr, "randomrun: %d of %d cases differ from eformer without a documented reason\n", s.NumBugs, s.Cases)
		os.Exit(1)
	}
}

// writeSummary writes the summary s as JSON to path, replaced whole (fileio.WriteAtomic), so that
// an interrupted run leaves no truncated file.
func writeSummary(path string, s any) error {
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("-json %s: %w", path, err)
	}
	return fileio.WriteAtomic("-json "+path, path, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}
