// Command randomrun checks quanta's quantizers against a randomized run of eformer
// (conformance/gen_random.py's output): it streams the cases of -dir one at a time, quantizes
// each input with quanta's host and graph quantizers on the backend GOMLX_BACKEND selects,
// compares every component bit for bit with eformer's, classifies each difference (see
// conformance.Class) and prints the counts per format, dtype and class. It exits with status 1 if
// any case is a quanta bug, and with status 2 if the run fails or the -json summary cannot be
// written. `make conformance-random` generates the run and calls it.
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
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/runtime"
)

var (
	flagDir  = flag.String("dir", "", "folder written by conformance/gen_random.py (cases.jsonl, arrays.bin)")
	flagJSON = flag.String("json", "", "also write the summary as JSON to this file")
)

func main() {
	flag.Parse()
	cmdflags.Exit("randomrun", cmdflags.ExitUsage, checkFlags())
	backend, err := runtime.Backend()
	if err != nil {
		fmt.Fprintf(os.Stderr, "randomrun: %+v\n", err)
		os.Exit(2)
	}
	fmt.Printf("randomrun: backend %s\n", backend.Description())
	s, err := conformance.CheckRandomDir(*flagDir, backend, runtime.IsGo(backend))
	if s != nil {
		s.Report(os.Stdout)
		if *flagJSON != "" {
			cmdflags.Exit("randomrun", 2, writeSummary(*flagJSON, s))
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

// checkFlags reports a missing -dir, an argument (a flag after it is not read) and a -json that
// cannot be written, naming the flag, before the run (the summary is written after it).
func checkFlags() error {
	if err := cmdflags.NoArguments(); err != nil {
		return err
	}
	switch {
	case *flagDir == "":
		return fmt.Errorf("-dir is required (the folder conformance/gen_random.py wrote)")
	case *flagJSON != "":
		return fileio.CheckOutput("-json", *flagJSON)
	}
	return nil
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
