// Command qk_targets writes the C header of the kernel table (kernelreg.CHeader): `go generate
// ./internal/cpukernels`.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/quanta-ml/quanta/internal/kernelreg"
)

func main() {
	out := flag.String("o", "qk_targets.h", "the header to write")
	flag.Parse()
	if err := os.WriteFile(*out, []byte(kernelreg.CHeader()), 0o644); err != nil {
		log.Fatal(err)
	}
}
