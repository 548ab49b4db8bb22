package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/plotstyle"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// result is one measured cell.
type result struct {
	Context string `json:"context"`
	// Shape is "KxN", or "KxN↔NxK" for a chain alternating both.
	Shape           string  `json:"shape"`
	Format          string  `json:"format"`
	M               int     `json:"m"`
	Layers          int     `json:"layers"`
	MsPerProduct    float64 `json:"ms_per_product"`
	BytesPerProduct float64 `json:"stored_bytes_per_product"`
	// SpeedupVsDense is the faster dense layout's time over this one, from the same run (the
	// faster of the cells of benchsuite.DenseNames with the same context, shape and M).
	SpeedupVsDense float64 `json:"speedup_vs_dense"`
	// DenseBaseline names that dense layout (results written before there were two lack it: their
	// baseline was benchsuite.Dense).
	DenseBaseline string `json:"dense_baseline,omitempty"`
	// LimitFraction is the stored bytes per second over the bandwidth limit.
	LimitFraction float64 `json:"bandwidth_limit_fraction"`
	// Built names the formulations the products were built with ("layout/strategy×count").
	Built string `json:"built"`
}

type report struct {
	Backend string `json:"backend"`
	// Environment is runtime.Environment: plugin, PJRT C API, kernels, XLA_FLAGS.
	Environment string   `json:"environment"`
	DType       string   `json:"activation_dtype"`
	StartedUTC  string   `json:"started_utc"`
	StreamMiB   int64    `json:"min_stream_mib_per_call"`
	ReadGBps    float64  `json:"read_gbps"`
	LimitGBps   float64  `json:"bandwidth_limit_gbps"`
	LimitSource string   `json:"bandwidth_limit_source"`
	Results     []result `json:"results"`
}

// fillSpeedups sets every result's speed-up over the faster dense layout of its context, shape and
// M, and names that layout.
func (rep *report) fillSpeedups() {
	type key struct {
		context, shape string
		m              int
	}
	fastest := map[key]result{}
	for _, r := range rep.Results {
		k := key{r.Context, r.Shape, r.M}
		if best, ok := fastest[k]; slices.Contains(benchsuite.DenseNames(), r.Format) && r.MsPerProduct > 0 &&
			(!ok || r.MsPerProduct < best.MsPerProduct) {
			fastest[k] = r
		}
	}
	for i, r := range rep.Results {
		if d, ok := fastest[key{r.Context, r.Shape, r.M}]; ok && r.MsPerProduct > 0 {
			rep.Results[i].SpeedupVsDense = d.MsPerProduct / r.MsPerProduct
			rep.Results[i].DenseBaseline = d.Format
		}
	}
}

// jsonOf returns the report as indented JSON, or why it cannot be (a figure that is not finite).
func jsonOf(rep *report) ([]byte, error) {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing the results as JSON: %w", err)
	}
	return append(data, '\n'), nil
}

// ordered returns the distinct values of field over the results, in first-seen order.
func ordered(results []result, field func(result) string) []string {
	var out []string
	for _, r := range results {
		if v := field(r); !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func rowsOf(results []result) []int {
	var ms []int
	for _, r := range results {
		if !slices.Contains(ms, r.M) {
			ms = append(ms, r.M)
		}
	}
	slices.Sort(ms)
	return ms
}

// wide reports whether every weight of a shape name is at least 2048 on both sides: the shapes
// the speed-up summary averages over.
func wide(shape string) bool {
	for _, s := range strings.Split(shape, "↔") {
		var k, n int
		if _, err := fmt.Sscanf(s, "%dx%d", &k, &n); err != nil || k < 2048 || n < 2048 {
			return false
		}
	}
	return true
}

// geomeanSpeedups is, per format and M, the geometric mean of the speed-ups over the wide shapes
// of a context (over all its shapes when none is wide), and which of the two it is.
func geomeanSpeedups(results []result, context string) (map[string]map[int]float64, string) {
	anyWide := false
	for _, r := range results {
		anyWide = anyWide || (r.Context == context && wide(r.Shape))
	}
	over := "the shapes of at least 2048 on both sides"
	if !anyWide {
		over = "all shapes (none is 2048 wide)"
	}
	logs := map[string]map[int][]float64{}
	for _, r := range results {
		if r.Context != context || (anyWide && !wide(r.Shape)) || r.SpeedupVsDense <= 0 {
			continue
		}
		if logs[r.Format] == nil {
			logs[r.Format] = map[int][]float64{}
		}
		logs[r.Format][r.M] = append(logs[r.Format][r.M], math.Log(r.SpeedupVsDense))
	}
	out := map[string]map[int]float64{}
	for f, byM := range logs {
		out[f] = map[int]float64{}
		for m, ls := range byM {
			sum := 0.0
			for _, l := range ls {
				sum += l
			}
			out[f][m] = math.Exp(sum / float64(len(ls)))
		}
	}
	return out, over
}

func markdown(rep *report) string {
	var sb strings.Builder
	ms := rowsOf(rep.Results)
	formats := ordered(rep.Results, func(r result) string { return r.Format })
	fmt.Fprintf(&sb, "Backend: %s; activations %s; started %s.\n", rep.Backend, rep.DType, rep.StartedUTC)
	fmt.Fprintf(&sb, "Environment: %s.\n", rep.Environment)
	fmt.Fprintf(&sb, "Read bandwidth of a 1 GiB buffer in this run: %.1f GB/s; bandwidth limit: %.1f GB/s (%s).\n",
		rep.ReadGBps, rep.LimitGBps, rep.LimitSource)
	fmt.Fprintf(&sb, "Each call streams at least %d MiB of stored weights in every format (distinct weights per call in the tables).\n",
		rep.StreamMiB)
	fmt.Fprintf(&sb, "Dense: %s. %s.\n\n", denseLegend, baselineLegend)
	for _, context := range ordered(rep.Results, func(r result) string { return r.Context }) {
		gm, over := geomeanSpeedups(rep.Results, context)
		fmt.Fprintf(&sb, "### Context %q: speed-up over the faster dense layout, geometric mean over %s\n\n", context, over)
		writeHeader(&sb, []string{"format"}, ms)
		for _, f := range formats {
			if gm[f] == nil {
				continue
			}
			fmt.Fprintf(&sb, "| %s |", f)
			for _, m := range ms {
				if v, ok := gm[f][m]; ok {
					fmt.Fprintf(&sb, " %.2fx |", v)
				} else {
					sb.WriteString(" — |")
				}
			}
			sb.WriteString("\n")
		}
		fmt.Fprintf(&sb, "\n### Context %q: ms per product (speed-up over the faster dense layout; fraction of the bandwidth limit)\n\n", context)
		writeHeader(&sb, []string{"shape", "format", "layers", "bytes/param"}, ms)
		for _, shape := range ordered(rep.Results, func(r result) string { return r.Shape }) {
			params := paramsOf(shape)
			for _, f := range formats {
				var cells []string
				layers, bytes := 0, 0.0
				for _, m := range ms {
					cell := " — |"
					for _, r := range rep.Results {
						if r.Context == context && r.Shape == shape && r.Format == f && r.M == m {
							cell = fmt.Sprintf(" %.3f (%.2fx; %.0f%%) |", r.MsPerProduct, r.SpeedupVsDense, 100*r.LimitFraction)
							layers, bytes = r.Layers, r.BytesPerProduct
						}
					}
					cells = append(cells, cell)
				}
				if layers == 0 {
					continue
				}
				fmt.Fprintf(&sb, "| %s | %s | %d | %.3f |%s\n", shape, f, layers, bytes/params, strings.Join(cells, ""))
			}
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// denseLegend and baselineLegend say, in the tables, what the dense layouts are and which one each
// speed-up is over.
const (
	denseLegend = "the float weight multiplied by lowering.DenseMatMul (" + benchsuite.Dense +
		", x·W, W stored (K, N)) or by lowering.DenseMatMulTransposed (" + benchsuite.DenseTransposed +
		", x·Wᵀ, W stored (N, K))"
	baselineLegend = "Every speed-up is over the faster of the two in the same context, shape and M: the dense row at " +
		"1.00x in the per-shape tables (dense_baseline in the JSON); the geometric means of the dense rows say how " +
		"far each layout is from that baseline"
)

// paramsOf is the mean number of parameters per weight of a shape name.
func paramsOf(shape string) float64 {
	parts := strings.Split(shape, "↔")
	total := 0.0
	for _, s := range parts {
		var k, n int
		if _, err := fmt.Sscanf(s, "%dx%d", &k, &n); err == nil {
			total += float64(k * n)
		}
	}
	return total / float64(len(parts))
}

// writeHeader writes a markdown table header: the leading columns, then one per M.
func writeHeader(sb *strings.Builder, leading []string, ms []int) {
	sb.WriteString("|")
	for _, c := range leading {
		sb.WriteString(" " + c + " |")
	}
	for _, m := range ms {
		fmt.Fprintf(sb, " M=%d |", m)
	}
	sb.WriteString("\n|" + strings.Repeat("---|", len(leading)+len(ms)) + "\n")
}

// powersOfTwo ticks a log axis at the powers of two in its range.
type powersOfTwo struct{}

// A range that is not finite and positive (a speed-up of 0 or +Inf) gets no ticks: its exponents
// would never end.
func (powersOfTwo) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	first, last := math.Floor(math.Log2(lo)), math.Ceil(math.Log2(hi))
	if math.IsInf(first, 0) || math.IsNaN(first) || math.IsInf(last, 0) || math.IsNaN(last) {
		return nil
	}
	for e := first; e <= last; e++ {
		v := math.Exp2(e)
		ticks = append(ticks, plot.Tick{Value: v, Label: strings.TrimSuffix(fmt.Sprintf("%g", v), ".0")})
	}
	return ticks
}

var palette = plotstyle.Colors(6)

// chart draws, per context, the geometric-mean speed-up over the faster dense layout against M (log
// scale), one line per quantized format, and a line at 1 (that dense layout).
func chart(rep *report) ([]byte, error) {
	contexts := ordered(rep.Results, func(r result) string { return r.Context })
	formats := ordered(rep.Results, func(r result) string { return r.Format })
	const width, height = 7 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(width, height*vg.Length(len(contexts)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(contexts), Cols: 1}
	for i, context := range contexts {
		gm, _ := geomeanSpeedups(rep.Results, context)
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s context, %s activations: speed-up over the faster dense layout (geometric mean)",
			context, rep.DType)
		p.X.Label.Text = "activation rows M"
		p.Y.Label.Text = "speed-up over the faster dense layout"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = powersOfTwo{}, powersOfTwo{}
		p.Add(plotter.NewGrid())
		ms := rowsOf(rep.Results)
		unit := plotter.XYs{{X: float64(ms[0]), Y: 1}, {X: float64(ms[len(ms)-1]), Y: 1}}
		if line, err := plotter.NewLine(unit); err == nil {
			line.Color = color.Gray{Y: 0x60}
			line.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(line)
			p.Legend.Add("faster of "+strings.Join(benchsuite.DenseNames(), ", "), line)
		}
		for j, f := range formats {
			if slices.Contains(benchsuite.DenseNames(), f) || len(gm[f]) == 0 {
				continue
			}
			var xys plotter.XYs
			for _, m := range ms {
				if v, ok := gm[f][m]; ok {
					xys = append(xys, plotter.XY{X: float64(m), Y: v})
				}
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("plotting %s: %w", f, err)
			}
			line.Color, points.Color = palette[j%len(palette)], palette[j%len(palette)]
			p.Add(line, points)
			p.Legend.Add(f, line)
		}
		// gonum widens an axis of one value v (one M, or speed-ups all at 1) to [v-1, v+1], which
		// from v = 1 starts at 0, where a log axis has no ticks to end; widen it by halves instead.
		for _, a := range []*plot.Axis{&p.X, &p.Y} {
			if a.Min == a.Max {
				a.Min, a.Max = a.Min/2, a.Max*2
			}
		}
		p.Legend.Top = true
		p.Draw(tiles.At(dc, 0, i))
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
