// Command roundtrip is the Go half of the bitsandbytes round trip (reference/bnb_roundtrip.sh runs
// both halves with the reference virtualenv; never in CI):
//
//	go run ./bnb/internal/roundtrip -write DIR   # quanta writes layers: DIR/q_*.safetensors, and
//	                                             # what quanta materializes: DIR/q_*.quanta.npy
//	go run ./bnb/internal/roundtrip -read DIR    # quanta reads bitsandbytes' DIR/b_*.safetensors and
//	                                             # writes what it materializes: DIR/b_*.quanta.npy
//
// The Python half loads the q_ files in bitsandbytes and compares its dequantized weights with the
// .quanta.npy files, and compares the b_ files' .quanta.npy with bitsandbytes' own values.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta"
	"github.com/quanta-ml/quanta/bnb"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/runtime"
	"github.com/quanta-ml/quanta/safetensors"
)

var (
	flagWrite = flag.String("write", "", "directory to write quanta's layers to")
	flagRead  = flag.String("read", "", "directory to read bitsandbytes' layers from")
)

func main() {
	flag.Parse()
	var err error
	switch {
	case *flagWrite != "":
		err = write(*flagWrite)
	case *flagRead != "":
		err = read(*flagRead)
	default:
		err = errors.New("give -write DIR or -read DIR")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "roundtrip: %+v\n", err)
		os.Exit(1)
	}
}

func weights(seed uint64, out, in int, dtype dtypes.DType) *tensors.Tensor {
	r := rand.New(rand.NewPCG(seed, 3))
	data := make([]float32, out*in)
	for i := range data {
		data[i] = float32(r.NormFloat64() / math.Sqrt(float64(in)))
	}
	t := tensors.FromFlatDataAndDimensions(data, out, in)
	if dtype == dtypes.Float32 {
		return t
	}
	backend, _ := runtime.Backend()
	return graph.MustExecOnce(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) }, t)
}

func write(dir string) error {
	type layer4 struct {
		name string
		make func() (*nf4.Array, error)
	}
	layers := []layer4{
		{"q_nf4dq_quanta_64x128", func() (*nf4.Array, error) {
			a, err := quanta.Quantize(weights(1, 64, 128, dtypes.Float32), quanta.Config{DoubleQuant: true})
			if err != nil {
				return nil, err
			}
			return a.(*nf4.Array), nil
		}},
		{"q_nf4_quanta_32x256_bs128", func() (*nf4.Array, error) { return nf4.Quantize(weights(2, 32, 256, dtypes.Float32), 128) }},
		{"q_nf4dq_bnb_48x200", func() (*nf4.Array, error) { return bnb.Quantize4bit(weights(3, 48, 200, dtypes.Float32), 64, true) }},
		{"q_nf4_bnb_33x7", func() (*nf4.Array, error) { return bnb.Quantize4bit(weights(4, 33, 7, dtypes.Float32), 64, false) }},
		{"q_nf4dq_bnb_1x100", func() (*nf4.Array, error) { return bnb.Quantize4bit(weights(5, 1, 100, dtypes.Float32), 64, true) }},
		{"q_nf4dq_bnb_16x64_bf16", func() (*nf4.Array, error) { return bnb.Quantize4bit(weights(6, 16, 64, dtypes.BFloat16), 64, true) }},
		{"q_nf4dq_bnb_300x70", func() (*nf4.Array, error) { return bnb.Quantize4bit(weights(7, 300, 70, dtypes.Float32), 64, true) }},
	}
	for i, l := range layers {
		w, err := l.make()
		if err != nil {
			return errors.WithMessage(err, l.name)
		}
		bias := weights(uint64(100+i), 1, w.Shape().Dim(0), dtypes.Float32)
		bias = tensors.FromFlatDataAndDimensions(tensors.MustCopyFlatData[float32](bias), w.Shape().Dim(0))
		list, err := (&bnb.Linear4bit{Weight: w, Bias: bias}).Tensors("")
		if err != nil {
			return errors.WithMessage(err, l.name)
		}
		if err := writeLayer(dir, l.name, list, w); err != nil {
			return err
		}
	}
	w8, err := qint8.Quantize(weights(8, 40, 24, dtypes.Float32))
	if err != nil {
		return err
	}
	l8, err := bnb.NewLinear8bitLt(w8, nil)
	if err != nil {
		return err
	}
	list, err := l8.Tensors("")
	if err != nil {
		return err
	}
	return writeLayer(dir, "q_int8_quanta_40x24", list, w8)
}

func writeLayer(dir, name string, list []safetensors.Tensor, w implicitarray.Array) error {
	if err := bnb.WriteFile(filepath.Join(dir, name+".safetensors"), list); err != nil {
		return err
	}
	return writeMaterialized(filepath.Join(dir, name+".quanta.npy"), w)
}

func read(dir string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "b_*.safetensors"))
	if err != nil {
		return err
	}
	for _, path := range paths {
		f, err := safetensors.Open(path)
		if err != nil {
			return err
		}
		var w implicitarray.Array
		if _, ok := f.Info(bnb.KeySCB); ok {
			l, err := bnb.ReadLinear8bitLt(f, "")
			if err != nil {
				return err
			}
			w = l.Weight
		} else {
			l, err := bnb.ReadLinear4bit(f, "")
			if err != nil {
				return err
			}
			w = l.Weight
			fmt.Printf("%s: %s\n", filepath.Base(path), l.Weight)
		}
		_ = f.Close()
		if err := writeMaterialized(strings.TrimSuffix(path, ".safetensors")+".quanta.npy", w); err != nil {
			return err
		}
	}
	fmt.Printf("read %d files\n", len(paths))
	return nil
}

// writeMaterialized writes w materialized in float32 as a .npy file.
func writeMaterialized(path string, w implicitarray.Array) error {
	backend, err := runtime.Backend()
	if err != nil {
		return err
	}
	dense, err := implicitarray.MaterializeOnHost(backend, w)
	if err != nil {
		return err
	}
	if dense.DType() != dtypes.Float32 {
		dense = graph.MustExecOnce(backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) }, dense)
	}
	values := tensors.MustCopyFlatData[float32](dense)
	dims := dense.Shape().Dimensions
	shape := ""
	for _, d := range dims {
		shape += fmt.Sprintf("%d, ", d)
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", strings.TrimSuffix(shape, " "))
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	buf := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
	buf = append(buf, header...)
	for _, v := range values {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	return os.WriteFile(path, buf, 0o644)
}
