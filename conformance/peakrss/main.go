// Command peakrss measures the peak resident memory of one host-side quantization: it builds a
// float32 tensor (rows×cols, N(0,1), filled in place so the input exists once), quantizes it
// with one format and prints the process's peak RSS (VmHWM from /proc/self/status, Linux only)
// before and after, with the input and output sizes, so the quantizer's scratch is
// peak − input − output.
//
//	go build -o /tmp/peakrss ./conformance/peakrss && /tmp/peakrss -format ternary -rows 8192 -cols 8192
//
// Run one format per process: the peak is per process.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

var (
	format = flag.String("format", "nf4", "nf4, int8, binary or ternary")
	rows   = flag.Int("rows", 8192, "rows of the float32 input")
	cols   = flag.Int("cols", 8192, "columns of the float32 input")
)

// formats are the accepted values of -format.
var formats = []string{"nf4", "int8", "binary", "ternary"}

// checkFlags reports an unknown -format, a -rows or -cols below 1 and an argument, naming the
// flag, before the input is built (shapes.Make panicked on a negative size).
func checkFlags() error {
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("argument %q; accepted: none (flags only: -format, -rows, -cols)", flag.Arg(0))
	case !slices.Contains(formats, *format):
		return fmt.Errorf("-format %q; accepted: %s", *format, strings.Join(formats, ", "))
	}
	return cmdflags.First(
		cmdflags.AtLeast("-rows", *rows, 1, ""),
		cmdflags.AtLeast("-cols", *cols, 1, ""),
	)
}

func main() {
	flag.Parse()
	cmdflags.Exit("peakrss", cmdflags.ExitUsage, checkFlags())

	x := tensors.FromShape(shapes.Make(dtypes.Float32, *rows, *cols))
	r := rand.New(rand.NewPCG(1, 2))
	x.MustMutableFlatData(func(flat any) {
		for i, data := 0, flat.([]float32); i < len(data); i++ {
			data[i] = float32(r.NormFloat64())
		}
	})
	runtime.GC()
	before := peakRSS()

	var q implicitarray.Array
	var err error
	switch *format {
	case "nf4":
		q, err = nf4.Quantize(x, nf4.DefaultBlockSize)
	case "int8":
		q, err = qint8.Quantize(x)
	case "binary":
		q, err = onebit.QuantizeBinary(x, nil)
	case "ternary":
		q, err = onebit.QuantizeTernary(x, nil)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "peakrss: %+v\n", err)
		os.Exit(1)
	}
	after := peakRSS()
	out := 0
	for _, c := range q.Components() {
		out += int(c.Shape().Memory())
	}
	in := int(x.Shape().Memory())
	const mib = 1 << 20
	fmt.Printf("%s %dx%d float32: input %d MiB, output %.1f MiB, peak RSS before %d MiB, after %d MiB, scratch ≈ %.1f MiB\n",
		*format, *rows, *cols, in/mib, float64(out)/mib, before/mib, after/mib, max(0, float64(after-before-out)/mib))
	runtime.KeepAlive(x)
}

// peakRSS returns the process's peak resident set size in bytes (0 if unknown).
func peakRSS() int {
	n, _ := fileio.ProcStatus("VmHWM")
	return int(n)
}
