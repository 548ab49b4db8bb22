package conformance

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/implicitarray"
	qint8 "github.com/quanta-ml/quanta/int8"
	"github.com/quanta-ml/quanta/internal/hostdata"
	"github.com/quanta-ml/quanta/nf4"
	"github.com/quanta-ml/quanta/onebit"
)

// randomSampleDir is the folder of the committed sample of randomized cases, relative to this
// package (gen_random.py's output format).
const randomSampleDir = "testdata-random"

// randomHeader is the first line of a randomized run's cases.jsonl.
type randomHeader struct {
	Format      string            `json:"format"`
	Seed        int64             `json:"seed"`
	N           int               `json:"n"`
	Pool        int               `json:"pool"`
	MaxElements int               `json:"max_elements"`
	Versions    map[string]string `json:"versions"`
	NF4Codebook []float32         `json:"nf4_codebook"`
}

// randomCase is one randomized case: the input eformer quantized and what it returned.
type randomCase struct {
	ID        string  `json:"id"`
	Kind      string  `json:"kind"` // nf4, int8, binary or ternary
	DType     string  `json:"dtype"`
	Shape     []int   `json:"shape"`
	Dist      string  `json:"dist"`
	Placement *string `json:"placement"`
	Params    struct {
		BlockSize int    `json:"block_size"`
		Axis      *[]int `json:"axis"` // nil: eformer's default (-1,)
	} `json:"params"`
	Arrays map[string]blobRef `json:"arrays"`
	Error  *raisedError       `json:"error"`
}

// blobRef locates one .npy blob in arrays.bin.
type blobRef struct {
	Offset      int64  `json:"offset"`
	Length      int64  `json:"length"`
	Shape       []int  `json:"shape"`
	DType       string `json:"dtype"`
	StoredDType string `json:"stored_dtype"`
}

// randomReader streams the cases of a randomized run, one at a time.
type randomReader struct {
	Header randomHeader
	dir    string
	cases  *os.File
	lines  *bufio.Scanner
	arrays *os.File
}

// openRandom opens dir/cases.jsonl and dir/arrays.bin and reads the header.
func openRandom(dir string) (*randomReader, error) {
	cases, err := os.Open(filepath.Join(dir, "cases.jsonl"))
	if err != nil {
		return nil, errors.Wrap(err, "conformance.OpenRandom")
	}
	arrays, err := os.Open(filepath.Join(dir, "arrays.bin"))
	if err != nil {
		cases.Close()
		return nil, errors.Wrap(err, "conformance.OpenRandom")
	}
	r := &randomReader{dir: dir, cases: cases, arrays: arrays, lines: bufio.NewScanner(cases)}
	r.lines.Buffer(make([]byte, 1<<16), 1<<24)
	if !r.lines.Scan() {
		r.Close()
		return nil, errors.Errorf("conformance.OpenRandom: %s/cases.jsonl has no header (%v)", dir, r.lines.Err())
	}
	if err := json.Unmarshal(r.lines.Bytes(), &r.Header); err != nil {
		r.Close()
		return nil, errors.Wrapf(err, "conformance.OpenRandom: header of %s/cases.jsonl", dir)
	}
	if r.Header.Format != "quanta-random-1" {
		r.Close()
		return nil, errors.Errorf("conformance.OpenRandom: format %q; accepted: quanta-random-1", r.Header.Format)
	}
	return r, nil
}

// Next returns the next case, or io.EOF after the last one.
func (r *randomReader) Next() (*randomCase, error) {
	if !r.lines.Scan() {
		if err := r.lines.Err(); err != nil {
			return nil, errors.Wrap(err, "conformance: reading cases.jsonl")
		}
		return nil, io.EOF
	}
	c := &randomCase{}
	if err := json.Unmarshal(r.lines.Bytes(), c); err != nil {
		return nil, errors.Wrapf(err, "conformance: parsing a case of %s/cases.jsonl", r.dir)
	}
	return c, nil
}

// Load reads the array name of case c from arrays.bin as a host tensor of its logical dtype.
func (r *randomReader) Load(c *randomCase, name string) (*tensors.Tensor, error) {
	ref, ok := c.Arrays[name]
	if !ok {
		return nil, errors.Errorf("case %s has no array %q", c.ID, name)
	}
	if ref.Length <= 0 || ref.Length > 1<<30 {
		return nil, errors.Errorf("case %s array %q: bad length %d", c.ID, name, ref.Length)
	}
	data := make([]byte, ref.Length)
	if _, err := r.arrays.ReadAt(data, ref.Offset); err != nil {
		return nil, errors.Wrapf(err, "case %s array %q", c.ID, name)
	}
	arr, err := readNPY(data)
	if err != nil {
		return nil, errors.WithMessagef(err, "case %s array %q", c.ID, name)
	}
	t, err := tensorFromNPY(arr, arrayRef{Shape: ref.Shape, DType: ref.DType, StoredDType: ref.StoredDType})
	return t, errors.WithMessagef(err, "case %s array %q", c.ID, name)
}

// Close closes the files.
func (r *randomReader) Close() error {
	err := r.cases.Close()
	if e := r.arrays.Close(); err == nil {
		err = e
	}
	return err
}

// Class is how a randomized case compares with eformer. Every class but ClassBug is accounted
// for in README.md: identical, a deliberate difference of quanta, or an eformer artifact.
type Class string

const (
	// ClassIdentical: every component bit-identical to eformer's (or both reject the input).
	ClassIdentical Class = "identical"
	// ClassNonFinite: the input holds NaN or ±Inf; eformer quantizes it into meaningless codes,
	// quanta returns an error (deliberate).
	ClassNonFinite Class = "deliberate: non-finite input rejected"
	// ClassBlockLonger: NF4 block size longer than the last axis allows; eformer pads every row to
	// one block, quanta returns an error. Checked: quanta's largest block gives eformer's absmax
	// and codes, eformer's extra bytes are all padding (deliberate).
	ClassBlockLonger Class = "deliberate: NF4 block longer than the last axis"
	// ClassHugeBlock: NF4 blocks whose absmax + tiny exceeds 2^126; eformer's flushed reciprocal
	// codes them as zeros, quanta encodes them (deliberate; the other blocks are identical).
	ClassHugeBlock Class = "deliberate: NF4 block above 2^126 encoded"
	// ClassThresholdOverflow: eformer's ternary variance overflows the dtype, its threshold is
	// +Inf (or NaN) and every value 0; quanta uses the float64 variance's square root (deliberate).
	ClassThresholdOverflow Class = "deliberate: ternary variance overflow not followed"
	// ClassSumRounding: eformer's ternary threshold differs from the correctly rounded one by no
	// more than the float32 rounding of XLA's sums allows, and every differing value lies between
	// the two thresholds (eformer artifact).
	ClassSumRounding Class = "eformer artifact: float32 sums of jnp.std"
	// ClassBug: any other difference, an unexpected error, or a graph quantizer that does not give
	// the host quantizer's bytes.
	ClassBug Class = "quanta bug"
)

// outcome is the result of checking one randomized case.
type outcome struct {
	Class Class
	// Detail explains a difference (empty when identical).
	Detail string
	// Graph says how the graph quantizer compared with the host one: "identical", or why it was
	// not run ("skipped: ...").
	Graph string
}

// randomChecker checks randomized cases against quanta's host and graph quantizers. It keeps one
// compiled graph per format, parameters and shape.
type randomChecker struct {
	backend backends.Backend
	// noFloat16Graphs: the backend cannot run float16 graphs (the pure-Go one).
	noFloat16Graphs bool
	execs           map[string]*implicitarray.Exec
}

// newRandomChecker returns a checker running graphs on backend; noFloat16Graphs skips the graph
// check of float16 cases (for the pure-Go backend).
func newRandomChecker(backend backends.Backend, noFloat16Graphs bool) *randomChecker {
	return &randomChecker{backend: backend, noFloat16Graphs: noFloat16Graphs, execs: map[string]*implicitarray.Exec{}}
}

// Close releases the compiled graphs.
func (rc *randomChecker) Close() {
	for _, e := range rc.execs {
		e.Finalize()
	}
	rc.execs = map[string]*implicitarray.Exec{}
}

// Check compares quanta with eformer on case c (arrays read from r).
func (rc *randomChecker) Check(r *randomReader, c *randomCase) (out outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = outcome{Class: ClassBug, Detail: fmt.Sprintf("panic: %v", p)}
		}
	}()
	load := func(name string) *tensors.Tensor {
		t, err := r.Load(c, name)
		if err != nil {
			panic(err)
		}
		return t
	}
	x := load("x")
	switch c.Kind {
	case "nf4":
		return rc.checkNF4(c, x, load)
	case "int8":
		return rc.checkInt8(c, x, load)
	case "binary", "ternary":
		return rc.checkOneBit(c, x, load)
	}
	return outcome{Class: ClassBug, Detail: fmt.Sprintf("unknown kind %q", c.Kind)}
}

func bug(format string, args ...any) outcome {
	return outcome{Class: ClassBug, Detail: fmt.Sprintf(format, args...)}
}

// nonFinite reports whether x holds NaN or ±Inf.
func nonFinite(x *tensors.Tensor) bool {
	for _, v := range tensorFloat64s(x) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return true
		}
	}
	return false
}

// rejected is the outcome of an input quanta must reject (err is its error): eformer raised
// too, or the input is not finite.
func rejected(c *randomCase, x *tensors.Tensor, err error) (outcome, bool) {
	switch {
	case c.Error != nil && err != nil:
		return outcome{Class: ClassIdentical, Detail: fmt.Sprintf("both reject: eformer %s, quanta %v", c.Error.Type, err), Graph: "skipped: rejected"}, true
	case c.Error != nil:
		return bug("eformer raised %s (%s), quanta accepted the input", c.Error.Type, c.Error.Message), true
	case nonFinite(x) && err != nil:
		return outcome{Class: ClassNonFinite, Graph: "skipped: rejected"}, true
	case nonFinite(x):
		return bug("non-finite input accepted"), true
	case err != nil:
		return bug("quanta returned an error: %v", err), true
	}
	return outcome{}, false
}

func (rc *randomChecker) exec(key string, fn any) *implicitarray.Exec {
	e, ok := rc.execs[key]
	if !ok {
		e = implicitarray.MustNewExec(rc.backend, fn).WithConfig(func(g *graph.Exec) { g.SetMaxCache(-1) })
		rc.execs[key] = e
	}
	return e
}

// graphSkipped says why the graph check of a case does not run ("" if it runs).
func (rc *randomChecker) graphSkipped(x *tensors.Tensor) string {
	if rc.noFloat16Graphs && x.DType() == dtypes.Float16 {
		return "skipped: the backend has no float16"
	}
	return ""
}

// sameComponents compares host components with graph ones, bit for bit.
func sameComponents(host, graphSide []implicitarray.Component) string {
	if len(host) != len(graphSide) {
		return fmt.Sprintf("%d components, the host %d", len(graphSide), len(host))
	}
	for i := range host {
		h, g := host[i].Tensor(), graphSide[i].Tensor()
		if !h.Shape().Equal(g.Shape()) {
			return fmt.Sprintf("component %d is %s, the host's %s", i, g.Shape(), h.Shape())
		}
		if hb, gb := tensorBytes(h), tensorBytes(g); string(hb) != string(gb) {
			return fmt.Sprintf("component %d: %s", i, firstDiff(h, g))
		}
	}
	return ""
}

// firstDiff describes the first differing element of two tensors of one shape.
func firstDiff(a, b *tensors.Tensor) string {
	av, bv := tensorFloat64s(a), tensorFloat64s(b)
	size := a.DType().Size()
	ab, bb := tensorBytes(a), tensorBytes(b)
	n := 0
	first := -1
	for i := range av {
		if string(ab[i*size:(i+1)*size]) != string(bb[i*size:(i+1)*size]) {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if first < 0 {
		return "identical"
	}
	return fmt.Sprintf("%d of %d elements differ, first at %v: %v vs %v", n, len(av),
		hostdata.Unflatten(first, a.Shape().Dimensions), av[first], bv[first])
}

func (rc *randomChecker) checkGraph(out outcome, x *tensors.Tensor, host implicitarray.Array, key string, fn any) outcome {
	if why := rc.graphSkipped(x); why != "" {
		out.Graph = why
		return out
	}
	got, err := rc.exec(key, fn).Call1(x)
	if err != nil {
		return bug("graph quantizer failed: %v", err)
	}
	if d := sameComponents(host.Components(), got.(implicitarray.Array).Components()); d != "" {
		return bug("graph quantizer differs from the host one: %s", d)
	}
	out.Graph = "identical"
	return out
}

func (rc *randomChecker) checkNF4(c *randomCase, x *tensors.Tensor, load func(string) *tensors.Tensor) outcome {
	bs := c.Params.BlockSize
	last := c.Shape[len(c.Shape)-1]
	q, err := nf4.Quantize(x, bs)
	if bs > nf4.MaxBlockSize(last) && c.Error == nil && !nonFinite(x) {
		if err == nil {
			return bug("block size %d accepted for a last axis of %d", bs, last)
		}
		if d := nf4OneBlock(x, load("packed"), load("absmax"), nf4.MaxBlockSize(last)); d != "" {
			return bug("block size %d: %s", bs, d)
		}
		return outcome{Class: ClassBlockLonger, Detail: fmt.Sprintf("block size %d, last axis %d", bs, last), Graph: "skipped: rejected"}
	}
	if out, done := rejected(c, x, err); done {
		return out
	}
	packed, absmax := load("packed"), load("absmax")
	if d := identicalBytes(q.Absmax().Tensor(), absmax); d != "" {
		return bug("absmax: %s", d)
	}
	out := outcome{Class: ClassIdentical}
	if d := identicalBytes(q.Packed().Tensor(), packed); d != "" {
		// Only blocks above 2^126 may differ (float32 and bfloat16: their reciprocal is subnormal).
		scales := tensorFloat64s(absmax)
		ours, theirs := tensorBytes(q.Packed().Tensor()), tensorBytes(packed)
		huge := 0
		for i := range ours {
			if ours[i] == theirs[i] {
				continue
			}
			if isHugeBlock(x.DType(), scales[i/(bs/2)]) {
				huge++
				continue
			}
			return bug("packed: %s", d)
		}
		out = outcome{Class: ClassHugeBlock, Detail: fmt.Sprintf("%d packed bytes of blocks above 2^126", huge)}
	}
	return rc.checkGraph(out, x, q, fmt.Sprintf("nf4/%d", bs), func(n *graph.Node) *nf4.Array { return nf4.QuantizeNode(n, bs) })
}

// nf4OneBlock checks eformer's codes for a block size longer than the last axis against quanta's
// largest block size: the same absmax, the same leading bytes of every row, only zero codes
// (0x77) in eformer's remaining padding. It returns "" or the difference.
func nf4OneBlock(x, packed, absmax *tensors.Tensor, blockSize int) string {
	q, err := nf4.Quantize(x, blockSize)
	if err != nil {
		return err.Error()
	}
	if d := identicalBytes(q.Absmax().Tensor(), absmax); d != "" {
		return "absmax: " + d
	}
	ours, theirs := tensorBytes(q.Packed().Tensor()), tensorBytes(packed)
	rows := absmax.Shape().Size()
	if len(ours) != rows*blockSize/2 || len(theirs)%rows != 0 {
		return fmt.Sprintf("%d packed bytes for %d rows of block %d; eformer's %d", len(ours), rows, blockSize, len(theirs))
	}
	ourRow, theirRow := blockSize/2, len(theirs)/rows
	scales := tensorFloat64s(absmax)
	for r := range rows {
		o, e := ours[r*ourRow:(r+1)*ourRow], theirs[r*theirRow:(r+1)*theirRow]
		if isHugeBlock(x.DType(), scales[r]) {
			// The other deliberate difference: eformer writes zeros for the whole row.
			if strings.Count(string(e), "\x77") != theirRow {
				return fmt.Sprintf("row %d above 2^126: eformer's packed bytes %x are not all 0x77", r, e)
			}
			continue
		}
		if string(o) != string(e[:ourRow]) || strings.Count(string(e[ourRow:]), "\x77") != theirRow-ourRow {
			return fmt.Sprintf("row %d: packed bytes %x, eformer's %x", r, o, e)
		}
	}
	return ""
}

// isHugeBlock reports whether an NF4 block of absmax in dtype has a subnormal reciprocal on XLA
// CPU (absmax + tiny above 2^126; never for float16).
func isHugeBlock(dtype dtypes.DType, absmax float64) bool {
	return dtype != dtypes.Float16 && float64(float32(absmax)+0x1p-126) > 0x1p126
}

func (rc *randomChecker) checkInt8(c *randomCase, x *tensors.Tensor, load func(string) *tensors.Tensor) outcome {
	var axes []int
	if c.Params.Axis != nil {
		axes = *c.Params.Axis
	}
	q, err := qint8.Quantize(x, axes...)
	if out, done := rejected(c, x, err); done {
		return out
	}
	if d := identicalBytes(q.Scale().Tensor(), load("scale")); d != "" {
		return bug("scale: %s", d)
	}
	if d := identicalBytes(q.Weight().Tensor(), load("weight")); d != "" {
		return bug("weight: %s", d)
	}
	return rc.checkGraph(outcome{Class: ClassIdentical}, x, q, fmt.Sprintf("int8/%v", axes),
		func(n *graph.Node) *qint8.Array { return qint8.QuantizeNode(n, axes...) })
}

func (rc *randomChecker) checkOneBit(c *randomCase, x *tensors.Tensor, load func(string) *tensors.Tensor) outcome {
	quantize, quantizeNode := onebit.QuantizeBinary, onebit.QuantizeBinaryNode
	if c.Kind == "ternary" {
		quantize, quantizeNode = onebit.QuantizeTernary, onebit.QuantizeTernaryNode
	}
	q, err := quantize(x, nil)
	if out, done := rejected(c, x, err); done {
		return out
	}
	weight := load("weight")
	out := outcome{Class: ClassIdentical}
	if d := identicalBytes(q.Packed().Tensor(), weight); d != "" {
		if c.Kind != "ternary" {
			return bug("packed: %s", d)
		}
		var why string
		out, why = ternaryDifference(x, q.Packed().Tensor(), weight, tensorFloat64s(load("threshold"))[0])
		if why != "" {
			return bug("packed: %s; %s", d, why)
		}
	}
	return rc.checkGraph(out, x, q, c.Kind, func(n *graph.Node) *onebit.Array { return quantizeNode(n, nil) })
}

// ternaryDifference classifies ternary bytes that differ from eformer's, given eformer's
// threshold te: an overflowed threshold (eformer's values all 0), or the float32 rounding of
// XLA's sums (te within the rounding bound of the exact variance, and every differing value
// between the two thresholds). It returns why neither applies, or "".
func ternaryDifference(x, ours, theirs *tensors.Tensor, te float64) (outcome, string) {
	dims := x.Shape().Dimensions
	ov, err := onebit.UnpackValues(onebit.TwoBit, tensorBytes(ours), dims...)
	if err != nil {
		return outcome{}, err.Error()
	}
	tv, err := onebit.UnpackValues(onebit.TwoBit, tensorBytes(theirs), dims...)
	if err != nil {
		return outcome{}, err.Error()
	}
	if math.IsInf(te, 0) || math.IsNaN(te) {
		if slices.ContainsFunc(tv, func(v int8) bool { return v != 0 }) {
			return outcome{}, fmt.Sprintf("eformer's threshold is %v but not every value is 0", te)
		}
		return outcome{Class: ClassThresholdOverflow, Detail: fmt.Sprintf("eformer's threshold %v", te)}, ""
	}
	// The loaded values: float32 and bfloat16 subnormals are zero for XLA CPU.
	v := tensorFloat64s(x)
	if x.DType() != dtypes.Float16 {
		for i := range v {
			if math.Abs(v[i]) < 0x1p-126 {
				v[i] = 0
			}
		}
	}
	n := float64(len(v))
	var sum, sumAbs float64
	for _, e := range v {
		sum += e
		sumAbs += math.Abs(e)
	}
	mean := sum / n
	var ss, sumAbsD float64
	for _, e := range v {
		ss += (e - mean) * (e - mean)
		sumAbsD += math.Abs(e - mean)
	}
	variance := ss / n
	// Bound of the float32 rounding of XLA's sums (recursive summation: at most (n-1)·u·Σ|terms|
	// whatever the order), carried through the mean into the squares.
	const u = 0x1p-24
	errMean := 2*n*u*sumAbs/n + 4*u*math.Abs(mean)
	errVar := (2*errMean*sumAbsD + n*errMean*errMean + (n+4)*u*ss) / n
	lo := onebit.TernaryThreshold(x.DType(), max(0, variance-errVar))
	hi := onebit.TernaryThreshold(x.DType(), variance+errVar)
	tq := onebit.TernaryThreshold(x.DType(), variance)
	if te < lo || te > hi {
		return outcome{}, fmt.Sprintf("eformer's threshold %v outside [%v, %v], the float32 rounding bound around quanta's %v", te, lo, hi, tq)
	}
	tMin, tMax := min(te, tq), max(te, tq)
	count := 0
	for i := range ov {
		if ov[i] == tv[i] {
			continue
		}
		if a := math.Abs(v[i]); a < tMin || a > tMax {
			return outcome{}, fmt.Sprintf("value %v at %v differs (ours %d, eformer's %d) but is not between the thresholds %v (quanta) and %v (eformer)",
				v[i], hostdata.Unflatten(i, dims), ov[i], tv[i], tq, te)
		}
		count++
	}
	return outcome{Class: ClassSumRounding, Detail: fmt.Sprintf("%d values between quanta's threshold %v and eformer's %v", count, tq, te)}, ""
}

// identicalBytes returns "" if ours has eformer's dtype, dimensions and bytes, or the difference.
func identicalBytes(ours, theirs *tensors.Tensor) string {
	if ours.DType() != theirs.DType() || !slices.Equal(ours.Shape().Dimensions, theirs.Shape().Dimensions) {
		return fmt.Sprintf("ours is %s, eformer's %s", ours.Shape(), theirs.Shape())
	}
	if string(tensorBytes(ours)) == string(tensorBytes(theirs)) {
		return ""
	}
	return firstDiff(ours, theirs)
}

// tensorBytes returns a host tensor's bytes (a copy).
func tensorBytes(t *tensors.Tensor) []byte {
	var out []byte
	if t.Size() == 0 {
		return out
	}
	if err := t.ConstBytes(func(data []byte) { out = slices.Clone(data) }); err != nil {
		panic(err)
	}
	return out
}

// tensorFloat64s converts a numeric host tensor to float64s.
func tensorFloat64s(t *tensors.Tensor) []float64 {
	out, err := hostdata.Float64s(t)
	if err != nil {
		panic(errors.WithMessage(err, "conformance"))
	}
	return out
}

// randomSummary counts outcomes per format, dtype and class, and keeps the bugs.
type randomSummary struct {
	Header  randomHeader
	Cases   int
	Counts  map[string]int // "kind/dtype/class"
	Graph   map[string]int // "identical", "skipped: ..."
	Bugs    []string       // "id: detail", the first 50
	NumBugs int
	Notes   map[Class][]string // a few examples per non-identical class
}

// newRandomSummary returns an empty summary for a run with header h.
func newRandomSummary(h randomHeader) *randomSummary {
	return &randomSummary{Header: h, Counts: map[string]int{}, Graph: map[string]int{}, Notes: map[Class][]string{}}
}

// Add records the outcome of case c.
func (s *randomSummary) Add(c *randomCase, o outcome) {
	s.Cases++
	s.Counts[fmt.Sprintf("%s/%s/%s", c.Kind, c.DType, o.Class)]++
	if o.Graph != "" {
		s.Graph[o.Graph]++
	}
	desc := fmt.Sprintf("%s (%s %s %v %s, placement %s): %s", c.ID, c.Kind, c.DType, c.Shape, c.Dist, placementOf(c), o.Detail)
	switch o.Class {
	case ClassBug:
		s.NumBugs++
		if len(s.Bugs) < 50 {
			s.Bugs = append(s.Bugs, desc)
		}
	case ClassIdentical:
	default:
		if len(s.Notes[o.Class]) < 3 {
			s.Notes[o.Class] = append(s.Notes[o.Class], desc)
		}
	}
}

func placementOf(c *randomCase) string {
	if c.Placement == nil {
		return "none"
	}
	return *c.Placement
}

// Report writes the summary as text.
func (s *randomSummary) Report(w io.Writer) {
	fmt.Fprintf(w, "randomized conformance: seed %d, %d cases (eformer %s, jax %s)\n",
		s.Header.Seed, s.Cases, s.Header.Versions["eformer"], s.Header.Versions["jax"])
	byClass := map[Class]int{}
	var keys []string
	for k, n := range s.Counts {
		keys = append(keys, k)
		parts := strings.SplitN(k, "/", 3)
		byClass[Class(parts[2])] += n
	}
	sort.Strings(keys)
	var classes []string
	for c := range byClass {
		classes = append(classes, string(c))
	}
	sort.Strings(classes)
	for _, c := range classes {
		fmt.Fprintf(w, "  %-52s %6d\n", c, byClass[Class(c)])
	}
	fmt.Fprintln(w, "  per format/dtype/class:")
	for _, k := range keys {
		fmt.Fprintf(w, "    %-70s %6d\n", k, s.Counts[k])
	}
	var graphs []string
	for g, n := range s.Graph {
		graphs = append(graphs, fmt.Sprintf("%s %d", g, n))
	}
	sort.Strings(graphs)
	fmt.Fprintf(w, "  graph quantizer vs host: %s\n", strings.Join(graphs, ", "))
	for _, c := range classes {
		for _, note := range s.Notes[Class(c)] {
			fmt.Fprintf(w, "  e.g. [%s] %s\n", c, note)
		}
	}
	for _, b := range s.Bugs {
		fmt.Fprintf(w, "  BUG %s\n", b)
	}
	if s.NumBugs > len(s.Bugs) {
		fmt.Fprintf(w, "  ... %d more bugs\n", s.NumBugs-len(s.Bugs))
	}
}

// CheckRandomDir streams every case of dir through a RandomChecker and returns the summary.
func CheckRandomDir(dir string, backend backends.Backend, noFloat16Graphs bool) (*randomSummary, error) {
	r, err := openRandom(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rc := newRandomChecker(backend, noFloat16Graphs)
	defer rc.Close()
	s := newRandomSummary(r.Header)
	for {
		c, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return s, err
		}
		s.Add(c, rc.Check(r, c))
	}
	if s.Cases != r.Header.N {
		return s, errors.Errorf("conformance: %s holds %d cases, its header says %d", dir, s.Cases, r.Header.N)
	}
	return s, nil
}
