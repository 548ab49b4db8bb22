package cpukernels

/*
#cgo CFLAGS: -O3 -std=gnu11 -Wall -Wextra -Wno-unused-parameter
#cgo LDFLAGS: -lpthread -lm
#include "quanta_kernels.h"
#include "qk_internal.h"
#include "qk_ggml.h"

// qk_test_flush_denormals turns the calling thread's flush-to-zero and denormals-are-zero modes
// on or off; -1 where there are none (not x86-64).
#if QK_X86
#include <xmmintrin.h>
static int qk_test_flush_denormals(int on) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(on ? csr | 0x8040u : csr & ~0x8040u);
  return 0;
}
#else
static int qk_test_flush_denormals(int on) { return -1; }
#endif
*/
import "C"

import (
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/gguf"
	"github.com/x448/float16"
)

// Sentinel errors, for errors.Is.
var (
	// ErrArgument: a size, length, element type, block size or scale kind the product does not
	// accept.
	ErrArgument = errors.New("invalid argument")
	// ErrUnsupported: the instruction set asked for cannot run on this CPU or build.
	ErrUnsupported = errors.New("instruction set not supported")
	// ErrNoMemory: the kernels' scratch memory could not be allocated.
	ErrNoMemory = errors.New("out of memory")
)

// ISA names an instruction-set path of the kernels.
type ISA int

const (
	// autoISA stands for the best path the CPU supports (for forceISA).
	autoISA ISA = C.QK_ISA_AUTO
	// Portable is plain C, on any architecture.
	Portable ISA = C.QK_ISA_PORTABLE
	// AVX2 needs AVX2, FMA and F16C (x86-64).
	AVX2 ISA = C.QK_ISA_AVX2
	// AVX512 needs AVX-512 F, BW, VL and DQ (x86-64).
	AVX512 ISA = C.QK_ISA_AVX512
)

// isas lists every path, best last.
func isas() []ISA { return []ISA{Portable, AVX2, AVX512} }

// String returns "portable", "avx2", "avx512" or "auto".
func (i ISA) String() string { return C.GoString(C.qk_isa_name(C.int(i))) }

// Supported reports whether the path can run on this CPU and build.
func (i ISA) Supported() bool { return C.qk_isa_supported(C.int(i)) != 0 }

// ActiveISA returns the path the products use now.
func ActiveISA() ISA { return ISA(C.qk_isa_active()) }

// bestISA returns the best path this CPU supports: the one used unless forceISA says otherwise.
func bestISA() ISA { return ISA(C.qk_isa_best()) }

// forceISA makes every later product use path i (autoISA: the best). It is meant for tests and
// benchmarks and must not race with products in flight. It returns an error wrapping
// ErrUnsupported if the CPU cannot run i.
func forceISA(i ISA) error {
	if st := C.qk_isa_force(C.int(i)); st != C.QK_OK {
		return errors.Wrapf(ErrUnsupported, "cpukernels.forceISA(%s)", i)
	}
	return nil
}

// Threads returns the number of threads a product may use, the caller's included.
func Threads() int { return int(C.qk_threads()) }

// SetThreads sets the number of threads (clamped to [1, maxThreads]); n <= 0 restores the default
// (QUANTA_KERNEL_THREADS, else the online CPUs). It returns the new count.
func SetThreads(n int) int {
	if n > math.MaxInt32 {
		n = math.MaxInt32
	} else if n < 0 {
		n = 0 // the default, whatever the low 32 bits say
	}
	return int(C.qk_set_threads(C.int(n)))
}

// SetXLAPool makes the kernels that XLA calls run on XLA's intra-op pool (on) or on quanta's
// (off) and returns the previous setting; the default is quanta's, or XLA's where
// QUANTA_KERNEL_POOL=xla. A product's bits do not depend on it.
func SetXLAPool(on bool) bool {
	v := int64(0)
	if on {
		v = 1
	}
	return tune(tuneXLAPool, v) != 0
}

// maxThreads bounds the thread count.
const maxThreads = C.QK_MAX_THREADS

// threadsEnv names the environment variable read for the default thread count.
const threadsEnv = "QUANTA_KERNEL_THREADS"

// ConfigNote returns a sentence about an ignored or clamped QUANTA_KERNEL_THREADS and one about an
// ignored QUANTA_KERNEL_POOL (a value other than xla or quanta), joined by "; ", or "".
func ConfigNote() string {
	var notes []string
	for _, s := range []*C.char{C.qk_config_note(), C.qk_pool_note()} {
		if s != nil {
			notes = append(notes, C.GoString(s))
		}
	}
	return strings.Join(notes, "; ")
}

// ScaleKind says how the float scale of an int8, 2-bit or 1-bit weight is laid out.
type ScaleKind int

const (
	// ScaleNone: no scale.
	ScaleNone ScaleKind = C.QK_SCALE_NONE
	// ScaleTensor: one value for the whole weight.
	ScaleTensor ScaleKind = C.QK_SCALE_TENSOR
	// ScaleK: one value per contracted index (k values; int8 only).
	ScaleK ScaleKind = C.QK_SCALE_K
	// ScaleN: one value per output column (n values).
	ScaleN ScaleKind = C.QK_SCALE_N
)

// String names the kind.
func (s ScaleKind) String() string {
	switch s {
	case ScaleNone:
		return "none"
	case ScaleTensor:
		return "tensor"
	case ScaleK:
		return "per-k"
	case ScaleN:
		return "per-n"
	}
	return "ScaleKind(?)"
}

// Activation is an element type of activations.
type Activation interface {
	float32 | bfloat16.BFloat16
}

// Scale is an element type of scales (NF4 absmax, int8 scales).
type Scale interface {
	float32 | bfloat16.BFloat16 | float16.Float16
}

func xDType[X Activation](x []X) C.int {
	if _, ok := any(x).([]bfloat16.BFloat16); ok {
		return C.QK_BF16
	}
	return C.QK_F32
}

func scaleDType[S Scale](s []S) C.int {
	switch any(s).(type) {
	case []bfloat16.BFloat16:
		return C.QK_BF16
	case []float16.Float16:
		return C.QK_F16
	}
	return C.QK_F32
}

// ptr returns the C pointer to the first element of s, or nil for an empty slice.
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(s))
}

// product returns a*b*..., or -1 if a factor is negative or the product overflows 2^58.
func product(factors ...int) int {
	const limit = 1 << 58
	r := 1
	for _, f := range factors {
		if f < 0 {
			return -1
		}
		if f != 0 && r > limit/f {
			return -1
		}
		r *= f
	}
	return r
}

type lengthCheck struct {
	name      string
	got, want int
}

// checkArgs returns an error naming the first size or length that does not fit: the sizes, then
// x (m×k, xLen elements), y (m×n, yLen elements) and the weight's buffers.
func checkArgs(op string, m, k, n, xLen, yLen int, weight ...lengthCheck) error {
	if m < 0 || k < 0 || n < 0 {
		return errors.Wrapf(ErrArgument, "%s: negative size m=%d k=%d n=%d", op, m, k, n)
	}
	lengths := append([]lengthCheck{{"x", xLen, product(m, k)}, {"y", yLen, product(m, n)}}, weight...)
	for _, l := range lengths {
		if l.want < 0 {
			return errors.Wrapf(ErrArgument, "%s: %s size overflows (m=%d k=%d n=%d)", op, l.name, m, k, n)
		}
		if l.got != l.want {
			return errors.Wrapf(ErrArgument, "%s: %s has %d elements, want %d (m=%d k=%d n=%d)", op, l.name, l.got,
				l.want, m, k, n)
		}
	}
	return nil
}

func statusError(op string, st C.int) error {
	if st == C.QK_OK {
		return nil
	}
	msg := C.GoString(C.qk_status_string(st))
	switch st {
	case C.QK_ERR_NOMEM:
		return errors.Wrapf(ErrNoMemory, "%s", op)
	case C.QK_ERR_ISA:
		return errors.Wrapf(ErrUnsupported, "%s", op)
	}
	return errors.Wrapf(ErrArgument, "%s: %s", op, msg)
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return -1
	}
	return (a + b - 1) / b
}

func checkBlock(op string, blockSize int) error {
	if blockSize <= 0 || blockSize%2 != 0 {
		return errors.Wrapf(ErrArgument, "%s: block size %d; accepted: even and positive", op, blockSize)
	}
	return nil
}

// nf4KN computes y = x · W (m×n) for W (k×n) stored as NF4 with blocks along n: packed holds
// k × ceil(n/blockSize) × blockSize/2 bytes, two codes a byte with the even element in the high
// nibble, and absmax one scale per block (k × ceil(n/blockSize)). x is m×k row-major.
func nf4KN[X Activation, S Scale](y []float32, x []X, packed []uint8, absmax []S, m, k, n, blockSize int) error {
	return nf4Product(true, y, x, packed, absmax, m, k, n, blockSize)
}

// nf4NK computes y = x · Wᵀ (m×n) for W (n×k) stored as NF4 with blocks along k (the contracted
// axis): packed holds n × ceil(k/blockSize) × blockSize/2 bytes and absmax n × ceil(k/blockSize)
// scales.
func nf4NK[X Activation, S Scale](y []float32, x []X, packed []uint8, absmax []S, m, k, n, blockSize int) error {
	return nf4Product(false, y, x, packed, absmax, m, k, n, blockSize)
}

// nf4Product runs nf4KN (kn: k stored rows of n) or nf4NK (n stored rows of k).
func nf4Product[X Activation, S Scale](kn bool, y []float32, x []X, packed []uint8, absmax []S, m, k, n,
	blockSize int) error {
	op, rows, span := "cpukernels.nf4NK", n, k
	if kn {
		op, rows, span = "cpukernels.nf4KN", k, n
	}
	if err := checkBlock(op, blockSize); err != nil {
		return err
	}
	nb := ceilDiv(span, blockSize)
	if err := checkArgs(op, m, k, n, len(x), len(y),
		lengthCheck{"packed", len(packed), product(rows, nb, blockSize/2)},
		lengthCheck{"absmax", len(absmax), product(rows, nb)}); err != nil {
		return err
	}
	xp, xdt, wp, sp, sdt := ptr(x), xDType(x), (*C.uint8_t)(ptr(packed)), ptr(absmax), scaleDType(absmax)
	cm, ck, cn, cbs, cy := C.int64_t(m), C.int64_t(k), C.int64_t(n), C.int64_t(blockSize), (*C.float)(ptr(y))
	if kn {
		return statusError(op, C.qk_nf4_kn(xp, xdt, wp, sp, sdt, cm, ck, cn, cbs, cy))
	}
	return statusError(op, C.qk_nf4_nk(xp, xdt, wp, sp, sdt, cm, ck, cn, cbs, cy))
}

// scaleLen returns the number of scale values of kind for a k×n weight, or -1 if the kind is not
// accepted (allowK: int8 accepts ScaleK).
func scaleLen(kind ScaleKind, k, n int, allowK bool) int {
	switch kind {
	case ScaleNone:
		return 0
	case ScaleTensor:
		return 1
	case ScaleK:
		if allowK {
			return k
		}
	case ScaleN:
		return n
	}
	return -1
}

func checkScale(op string, kind ScaleKind, got, want int) error {
	if want < 0 {
		return errors.Wrapf(ErrArgument, "%s: scale kind %s not accepted", op, kind)
	}
	if got != want {
		return errors.Wrapf(ErrArgument, "%s: %d scale values for kind %s, want %d", op, got, kind, want)
	}
	return nil
}

// int8KN computes y = x · W for W (k×n) = w × scale, w int8 k×n row-major; kind says how scale
// is laid out (ScaleK: one per row of w, eformer's default; ScaleN: one per column).
func int8KN[X Activation, S Scale](y []float32, x []X, w []int8, scale []S, kind ScaleKind, m, k, n int) error {
	return int8Product(true, y, x, w, scale, kind, m, k, n)
}

// int8NK computes y = x · Wᵀ for W (n×k) = w × scale, w int8 n×k row-major (bitsandbytes'
// Linear8bitLt); ScaleN is one scale per row of w, ScaleK one per column.
func int8NK[X Activation, S Scale](y []float32, x []X, w []int8, scale []S, kind ScaleKind, m, k, n int) error {
	return int8Product(false, y, x, w, scale, kind, m, k, n)
}

// int8Product runs int8KN (kn) or int8NK: the same sizes, w stored either way.
func int8Product[X Activation, S Scale](kn bool, y []float32, x []X, w []int8, scale []S, kind ScaleKind, m, k,
	n int) error {
	op := "cpukernels.int8NK"
	if kn {
		op = "cpukernels.int8KN"
	}
	if err := checkArgs(op, m, k, n, len(x), len(y), lengthCheck{"w", len(w), product(k, n)}); err != nil {
		return err
	}
	if err := checkScale(op, kind, len(scale), scaleLen(kind, k, n, true)); err != nil {
		return err
	}
	xp, xdt, wp, sp, sdt := ptr(x), xDType(x), (*C.int8_t)(ptr(w)), ptr(scale), scaleDType(scale)
	ckind, cm, ck, cn, cy := C.int(kind), C.int64_t(m), C.int64_t(k), C.int64_t(n), (*C.float)(ptr(y))
	if kn {
		return statusError(op, C.qk_int8_kn(xp, xdt, wp, sp, sdt, ckind, cm, ck, cn, cy))
	}
	return statusError(op, C.qk_int8_nk(xp, xdt, wp, sp, sdt, ckind, cm, ck, cn, cy))
}

// twoBitKN computes y = x · W for W (k×n) with values in {-1, 0, +1} stored in eformer's 2-bit
// layout: packed (k/4)×n, code value+1, quarter-strided along k (see the package
// documentation). scale (float32) is ScaleNone, ScaleTensor or ScaleN.
func twoBitKN[X Activation](y []float32, x []X, packed []uint8, scale []float32, kind ScaleKind, m, k, n int) error {
	return signsProduct(4, y, x, packed, scale, kind, m, k, n)
}

// oneBitKN computes y = x · W for W (k×n) with values in {-1, +1} stored one bit each: packed
// (k/8)×n, eighth-strided along k, bit 1 for +1. scale as for twoBitKN.
func oneBitKN[X Activation](y []float32, x []X, packed []uint8, scale []float32, kind ScaleKind, m, k, n int) error {
	return signsProduct(8, y, x, packed, scale, kind, m, k, n)
}

// signsProduct runs twoBitKN (per = 4 values a byte) or oneBitKN (per = 8).
func signsProduct[X Activation](per int, y []float32, x []X, packed []uint8, scale []float32, kind ScaleKind, m, k,
	n int) error {
	op := "cpukernels.oneBitKN"
	if per == 4 {
		op = "cpukernels.twoBitKN"
	}
	if k%per != 0 {
		return errors.Wrapf(ErrArgument, "%s: k=%d is not a multiple of %d", op, k, per)
	}
	if err := checkArgs(op, m, k, n, len(x), len(y),
		lengthCheck{"packed", len(packed), product(k/per, n)}); err != nil {
		return err
	}
	if err := checkScale(op, kind, len(scale), scaleLen(kind, k, n, false)); err != nil {
		return err
	}
	xp, xdt, wp, sp := ptr(x), xDType(x), (*C.uint8_t)(ptr(packed)), (*C.float)(ptr(scale))
	ckind, cm, ck, cn, cy := C.int(kind), C.int64_t(m), C.int64_t(k), C.int64_t(n), (*C.float)(ptr(y))
	if per == 4 {
		return statusError(op, C.qk_twobit_kn(xp, xdt, wp, sp, ckind, cm, ck, cn, cy))
	}
	return statusError(op, C.qk_onebit_kn(xp, xdt, wp, sp, ckind, cm, ck, cn, cy))
}

// GGMLBlock returns the elements and bytes of one block of typ as the kernels know them; ok is
// false for a type they do not serve (every type of gguf.BlockTypes is served).
func GGMLBlock(typ gguf.Type) (size, bytes int, ok bool) {
	var bs, bb C.int64_t
	if C.qk_ggml_block_info(C.int(typ), &bs, &bb) != C.QK_OK {
		return 0, 0, false
	}
	return int(bs), int(bb), true
}

// ggmlNK computes y = x · Wᵀ (m×n) for W (n×k) stored in one of ggml's block types as a GGUF file
// stores a linear weight: blocks holds n rows of k/blockSize blocks of typ, byte for byte, and k
// is a multiple of the block size. W's values are those of ggml's dequantize_row_* bit for bit
// (gguf.Decode's); the product accumulates in float32.
func ggmlNK[X Activation](y []float32, x []X, typ gguf.Type, blocks []uint8, m, k, n int) error {
	const op = "cpukernels.ggmlNK"
	bs, bb, ok := GGMLBlock(typ)
	if !ok {
		return errors.Wrapf(ErrArgument, "%s: type %s; accepted: %v", op, typ, gguf.BlockTypes())
	}
	if k%bs != 0 {
		return errors.Wrapf(ErrArgument, "%s: k=%d is not a multiple of %s's block size %d", op, k, typ, bs)
	}
	if err := checkArgs(op, m, k, n, len(x), len(y),
		lengthCheck{"blocks", len(blocks), product(n, k/bs, bb)}); err != nil {
		return err
	}
	return statusError(op, C.qk_ggml_nk(ptr(x), xDType(x), C.int(typ), (*C.uint8_t)(ptr(blocks)), C.int64_t(m),
		C.int64_t(k), C.int64_t(n), (*C.float)(ptr(y))))
}

// denseKN computes y = x · w for a float32 w (k×n): the kernel of the quanta_f32_kn custom call
// and the in-package baseline of the benchmarks.
func denseKN(y, x, w []float32, m, k, n int) error {
	const op = "cpukernels.denseKN"
	if err := checkArgs(op, m, k, n, len(x), len(y), lengthCheck{"w", len(w), product(k, n)}); err != nil {
		return err
	}
	return statusError(op, C.qk_f32_kn((*C.float)(ptr(x)), (*C.float)(ptr(w)), C.int64_t(m), C.int64_t(k),
		C.int64_t(n), (*C.float)(ptr(y))))
}

// denseNK computes y = x · wᵀ for a float32 w (n×k), PyTorch's Linear.weight: the kernel of
// the quanta_f32_nk custom call.
func denseNK(y, x, w []float32, m, k, n int) error {
	const op = "cpukernels.denseNK"
	if err := checkArgs(op, m, k, n, len(x), len(y), lengthCheck{"w", len(w), product(n, k)}); err != nil {
		return err
	}
	return statusError(op, C.qk_f32_nk((*C.float)(ptr(x)), (*C.float)(ptr(w)), C.int64_t(m), C.int64_t(k),
		C.int64_t(n), (*C.float)(ptr(y))))
}

// readProbe reads buf with the kernels' threads and returns a checksum: timing it gives the
// streaming-read bandwidth the products are compared with.
func readProbe(buf []byte) uint64 {
	return uint64(C.qk_read_probe(ptr(buf), C.int64_t(len(buf))))
}

// probeBuffer returns a buffer of the given size for readProbe, its pages mapped (one byte
// written in each), so that no read of it is a page fault.
func probeBuffer(bytes int) []byte {
	buf := make([]byte, bytes)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i)
	}
	return buf
}

// ReadBandwidth returns the host's streaming-read bandwidth in bytes per second: the best of three
// reads of a buffer of the given size (after one that maps its pages), with the kernels' threads,
// each reading several streams at once as the products do. It is the limit the products at one
// activation row are judged by; the buffer must be well over the last-level cache.
func ReadBandwidth(bytes int) float64 {
	buf := probeBuffer(bytes)
	readProbe(buf)
	best := math.Inf(1)
	for range 3 {
		start := time.Now()
		readProbe(buf)
		best = min(best, time.Since(start).Seconds())
	}
	return float64(len(buf)) / best
}

// Tuning knobs, for this package's tests and benchmarks.
const (
	tuneSpinNs     = C.QK_TUNE_SPIN_NS
	tuneSmallWork  = C.QK_TUNE_SMALL_WORK
	tuneChunkBytes = C.QK_TUNE_CHUNK_BYTES
	tuneFusedMaxM  = C.QK_TUNE_FUSED_MAX_M
	tunePanels     = C.QK_TUNE_PANELS
	tuneXLAPool    = C.QK_TUNE_XLA_POOL
)

// tune sets a knob and returns its previous value.
func tune(knob int, value int64) int64 { return int64(C.qk_tune(C.int(knob), C.int64_t(value))) }

// nf4Decode decodes an NF4 weight of rows stored rows of span elements (either layout) with the
// active path's decode (tests of the decode, bit for bit); the caller checks the lengths.
func nf4Decode[S Scale](packed []uint8, absmax []S, rows, span, blockSize int) ([]float32, error) {
	out := make([]float32, rows*span)
	return out, statusError("cpukernels.nf4Decode", C.qk_nf4_decode((*C.uint8_t)(ptr(packed)), ptr(absmax), scaleDType(absmax),
		C.int64_t(rows), C.int64_t(span), C.int64_t(blockSize), (*C.float)(ptr(out))))
}

// ggmlDecode decodes rows×k elements of typ with the active path's tile decode (tests of the
// decode, bit for bit); the caller checks the lengths.
func ggmlDecode(typ gguf.Type, blocks []uint8, rows, k int) ([]float32, error) {
	out := make([]float32, rows*k)
	return out, statusError("cpukernels.ggmlDecode", C.qk_ggml_decode(C.int(typ), (*C.uint8_t)(ptr(blocks)),
		C.int64_t(rows), C.int64_t(k), (*C.float)(ptr(out))))
}

// ggmlX8 returns the group of the 8-bit activations a product of typ with m rows runs with on the
// active path (finite activations), or 0 if it runs on float activations.
func ggmlX8(typ gguf.Type, m int) int {
	f := C.qk_ggml_fmt(C.int(typ))
	if f < 0 {
		return 0
	}
	return int(C.qk_nk_x8(f, C.int64_t(m)))
}

// x8Quantize returns the 8-bit activations of the float32 m×k activations x in groups of g as the
// active path prepares them for the integer route (tests, bit for bit across paths): codes,
// scales, sums of 16 codes, scales times their group's sum. The caller checks the sizes.
func x8Quantize(x []float32, m, k, g int) (q []int8, d []float32, s []int16, ds []float32) {
	q, d, s, ds = make([]int8, m*k), make([]float32, m*k/g), make([]int16, m*k/16), make([]float32, m*k/g)
	C.qk_x8_quantize((*C.float)(ptr(x)), C.int64_t(m), C.int64_t(k), C.int64_t(g), (*C.int8_t)(ptr(q)),
		(*C.float)(ptr(d)), (*C.int16_t)(ptr(s)), (*C.float)(ptr(ds)))
	return q, d, s, ds
}

// flushDenormals turns the calling thread's flushing of denormals to zero (FTZ and DAZ, as XLA's
// CPU client runs its computations) on or off, and reports whether the CPU has the modes (tests:
// lock the goroutine to its thread first).
func flushDenormals(on bool) bool {
	v := C.int(0)
	if on {
		v = 1
	}
	return C.qk_test_flush_denormals(v) == 0
}

// rawNF4KN calls the C entry point without the Go-side checks (tests of the C checks).
func rawNF4KN(x, packed, absmax unsafe.Pointer, xdt, adt, m, k, n, bs int, y unsafe.Pointer) int {
	return int(C.qk_nf4_kn(x, C.int(xdt), (*C.uint8_t)(packed), absmax, C.int(adt), C.int64_t(m), C.int64_t(k),
		C.int64_t(n), C.int64_t(bs), (*C.float)(y)))
}

// attention runs qk_attention (tests): q (batch, heads, seq, hd), keys and values (batch, kv,
// length, hd) as float32 ([]float32) or as IEEE halves ([]uint16), visible (seq, nKeys) as 0/1
// bytes, out like q; the caller checks the lengths.
func attention[KV float32 | uint16](out, q []float32, keys, values []KV, visible []uint8, batch, heads, kv, seq, length, nKeys, hd int, scale float32) error {
	dtype := C.int(C.QK_F32)
	if _, half := any(keys).([]uint16); half {
		dtype = C.QK_F16
	}
	return statusError("cpukernels.attention", C.qk_attention((*C.float)(ptr(q)), ptr(keys), ptr(values), dtype,
		(*C.uint8_t)(ptr(visible)), C.int64_t(batch), C.int64_t(heads), C.int64_t(kv),
		C.int64_t(seq), C.int64_t(length), C.int64_t(nKeys), C.int64_t(hd), C.float(scale), (*C.float)(ptr(out))))
}
