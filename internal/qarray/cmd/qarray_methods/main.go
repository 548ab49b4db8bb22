// Command qarray_methods writes a format package's methods.go (qarray.MethodsSource): go generate
// in nf4, int8, onebit and ggml.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/quanta-ml/quanta/internal/qarray"
)

func main() {
	pkg := flag.String("pkg", "", "the package name")
	out := flag.String("o", "methods.go", "the file to write")
	flag.Parse()
	if *pkg == "" {
		log.Fatal("qarray_methods: -pkg is required")
	}
	if err := os.WriteFile(*out, []byte(qarray.MethodsSource(*pkg)), 0o644); err != nil {
		log.Fatal(err)
	}
}
