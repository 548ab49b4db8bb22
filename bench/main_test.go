package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestPeakGBps: a -peak-gbps that is not a finite bandwidth (or 0, unknown) is an error naming the
// flag, before anything is measured (an infinite limit made every fraction 0 and the JSON empty).
func TestPeakGBps(t *testing.T) {
	for _, tc := range []struct {
		value float64
		ok    bool
	}{
		{0, true}, {4800, true}, {math.Inf(1), false}, {math.NaN(), false}, {-5, false},
	} {
		old := *flagPeakGBps
		*flagPeakGBps = tc.value
		_, err := parseConfig()
		*flagPeakGBps = old
		if tc.ok && err != nil || !tc.ok && (err == nil || !strings.Contains(err.Error(), "-peak-gbps")) {
			t.Errorf("-peak-gbps %v: parseConfig() error %v; want ok = %v", tc.value, err, tc.ok)
		}
	}
}

// TestJSONNotFinite: a report holding a figure JSON cannot carry is an error, not an empty file.
func TestJSONNotFinite(t *testing.T) {
	rep := &report{Results: []result{{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, LimitFraction: math.Inf(1)}}}
	if data, err := jsonOf(rep); err == nil {
		t.Errorf("jsonOf of an infinite fraction = %q, no error", data)
	}
	rep.Results[0].LimitFraction = 0.5
	data, err := jsonOf(rep)
	if err != nil || !strings.Contains(string(data), `"bandwidth_limit_fraction": 0.5`) {
		t.Errorf("jsonOf = %s, %v", data, err)
	}
}

// TestParseFormatsTwice: a format named twice, or a dense layout (both always measured), is an
// error: it was measured twice, and the tables showed one of the two while the JSON held both, the
// first dense rows with a speed-up over the second.
func TestParseFormatsTwice(t *testing.T) {
	// A strategy is read whatever its case and spaces, and nf4@auto is nf4.
	for _, s := range []string{"dense,nf4", "nf4,dense-t", " dense-t", "nf4,int8,nf4", "nf4@kernel, nf4@kernel",
		"nf4@kernel,nf4@Kernel", "nf4,nf4@auto"} {
		if _, err := parseFormats(s); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("parseFormats(%q): error %v; want one saying a format is measured twice", s, err)
		}
	}
	got, err := parseFormats("nf4,nf4@kernel,int8")
	if err != nil || len(got) != 5 || got[0].Name != "dense" || got[1].Name != "dense-t" || got[3].Name != "nf4@kernel" ||
		!got[0].IsDense() || !got[1].IsDense() || got[2].IsDense() {
		t.Errorf("parseFormats(nf4,nf4@kernel,int8) = %v, %v; want dense, dense-t, then the named formats", got, err)
	}
}

// TestSpeedupOverFasterDense: every cell's speed-up is over the faster of the two dense layouts of
// its context, shape and M, whichever that is, and names it; old results with one dense layout
// keep their speed-ups over it.
func TestSpeedupOverFasterDense(t *testing.T) {
	cell := func(context, shape, format string, m int, ms float64) result {
		return result{Context: context, Shape: shape, Format: format, M: m, MsPerProduct: ms}
	}
	type want struct {
		speedup  float64
		baseline string
	}
	for _, c := range []struct {
		name    string
		results []result
		want    []want // per result, in order
	}{
		{"dense faster", []result{cell("chain", "8x8", "dense", 1, 2), cell("chain", "8x8", "dense-t", 1, 4), cell("chain", "8x8", "nf4", 1, 1)},
			[]want{{1, "dense"}, {0.5, "dense"}, {2, "dense"}}},
		{"dense-t faster", []result{cell("chain", "8x8", "dense", 1, 4), cell("chain", "8x8", "dense-t", 1, 2), cell("chain", "8x8", "nf4", 1, 1)},
			[]want{{0.5, "dense-t"}, {1, "dense-t"}, {2, "dense-t"}}},
		{"per M and context", []result{
			cell("chain", "8x8", "dense", 1, 3), cell("chain", "8x8", "dense", 16, 2),
			cell("chain", "8x8", "dense-t", 1, 2), cell("chain", "8x8", "dense-t", 16, 4),
			cell("add", "8x8", "dense", 1, 1), cell("add", "8x8", "dense-t", 1, 5),
			cell("chain", "8x8", "nf4", 1, 1), cell("chain", "8x8", "nf4", 16, 1), cell("add", "8x8", "nf4", 1, 0.5)},
			[]want{{2.0 / 3, "dense-t"}, {1, "dense"}, {1, "dense-t"}, {0.5, "dense"}, {1, "dense"}, {0.2, "dense"},
				{2, "dense-t"}, {2, "dense"}, {2, "dense"}}},
		{"old results, dense alone", []result{cell("add", "8x8", "dense", 4, 3), cell("add", "8x8", "int8", 4, 1)},
			[]want{{1, "dense"}, {3, "dense"}}},
		{"no dense cell", []result{cell("add", "8x8", "dense", 4, 3), cell("add", "16x8", "int8", 4, 1)},
			[]want{{1, "dense"}, {0, ""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := &report{Results: c.results}
			rep.fillSpeedups()
			for i, r := range rep.Results {
				if math.Abs(r.SpeedupVsDense-c.want[i].speedup) > 1e-12 || r.DenseBaseline != c.want[i].baseline {
					t.Errorf("%s %s %s M=%d: speed-up %v over %q; want %v over %q", r.Context, r.Shape, r.Format, r.M,
						r.SpeedupVsDense, r.DenseBaseline, c.want[i].speedup, c.want[i].baseline)
				}
			}
		})
	}
}

// TestMarkdownDenseBaseline: the tables say what the two dense layouts are and that the speed-ups
// are over the faster, and their geometric means follow the faster layout per M.
func TestMarkdownDenseBaseline(t *testing.T) {
	rep := &report{DType: "Float32", Results: []result{
		{Context: "chain", Shape: "8x8", Format: "dense", M: 1, MsPerProduct: 2},
		{Context: "chain", Shape: "8x8", Format: "dense", M: 64, MsPerProduct: 4},
		{Context: "chain", Shape: "8x8", Format: "dense-t", M: 1, MsPerProduct: 1},
		{Context: "chain", Shape: "8x8", Format: "dense-t", M: 64, MsPerProduct: 5},
		{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, MsPerProduct: 0.25},
		{Context: "chain", Shape: "8x8", Format: "nf4", M: 64, MsPerProduct: 2},
	}}
	rep.fillSpeedups()
	table := markdown(rep)
	for _, want := range []string{
		"lowering.DenseMatMul (dense, x·W, W stored (K, N))",
		"lowering.DenseMatMulTransposed (dense-t, x·Wᵀ, W stored (N, K))",
		"Every speed-up is over the faster of the two in the same context, shape and M",
		"speed-up over the faster dense layout, geometric mean",
		"| nf4 | 4.00x | 2.00x |",
		"| dense | 0.50x | 1.00x |",
		"| dense-t | 1.00x | 0.80x |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("markdown lacks %q:\n%s", want, table)
		}
	}
	data, err := jsonOf(rep)
	if err != nil || !strings.Contains(string(data), `"dense_baseline": "dense-t"`) {
		t.Errorf("jsonOf = %s, %v; want each cell's dense_baseline", data, err)
	}
	if _, err := chart(rep); err != nil {
		t.Errorf("chart: %v", err)
	}
}

// TestChartOneRow: a chart of one activation row count (-m 1, a decoding-only run) is drawn; its
// log axis was widened to start at 0 and the tick loop never ended, eating memory.
func TestChartOneRow(t *testing.T) {
	for _, speedup := range []float64{2, 1} {
		rep := &report{DType: "Float32", Results: []result{
			{Context: "chain", Shape: "8x8", Format: "dense", M: 1, MsPerProduct: 1, SpeedupVsDense: 1},
			{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, MsPerProduct: 1 / speedup, SpeedupVsDense: speedup},
		}}
		data, err := chart(rep)
		if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("chart of M=1, speed-up %v: %d bytes, %v; want a PNG", speedup, len(data), err)
		}
	}
}

// TestListedTwice: a value of -m, -shapes or -contexts listed twice is an error (it was measured
// twice, the tables showing one of the two).
func TestListedTwice(t *testing.T) {
	for _, tc := range []struct {
		flag  *string
		value string
	}{
		{flagM, "1,4,1"}, {flagPairs, "576x1536,576x1536"}, {flagContexts, "chain,add,chain"},
	} {
		old := *tc.flag
		*tc.flag = tc.value
		_, err := parseConfig()
		*tc.flag = old
		if err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("%q: parseConfig() error %v; want one saying a value is listed twice", tc.value, err)
		}
	}
}

// TestTicksNotFinite: a log axis whose range is not finite and positive (a speed-up of 0 or +Inf
// in the results) gets no ticks instead of an endless list.
func TestTicksNotFinite(t *testing.T) {
	for _, r := range [][2]float64{{0, 4}, {0.5, math.Inf(1)}, {math.NaN(), 2}} {
		if ticks := (powersOfTwo{}).Ticks(r[0], r[1]); ticks != nil {
			t.Errorf("Ticks(%v, %v) = %d ticks; want none", r[0], r[1], len(ticks))
		}
	}
	if ticks := (powersOfTwo{}).Ticks(0.5, 4); len(ticks) != 4 {
		t.Errorf("Ticks(0.5, 4) = %v; want 0.5, 1, 2, 4", ticks)
	}
}

// TestArguments: an argument is an error naming it, before anything runs; it was ignored, and
// with it every flag after it (flag parsing stops at the first argument).
func TestArguments(t *testing.T) {
	testutil.ArgumentRefused(t, func() error { _, err := parseConfig(); return err })
}

// TestOutputsChecked: an output that cannot be written is an error naming its flag before
// anything is measured, not after the measurements.
func TestOutputsChecked(t *testing.T) {
	testutil.OutputsChecked(t, func() error { _, err := parseConfig(); return err },
		map[string]*string{"-json": flagJSON, "-markdown": flagMarkdown, "-png": flagPNG})
}

// TestExitStatus: a command line refused ends with one line naming the flag and exit status 2, as
// package flag's own refusals; a backend that does not start with one line naming it and status
// 1, not a Go panic trace (main used runtime.MustBackend). main runs in a child process of the test
// binary.
func TestExitStatus(t *testing.T) {
	if args := os.Getenv("QUANTA_BENCH_TEST_MAIN"); args != "" {
		os.Args = append([]string{"bench"}, strings.Fields(args)...)
		main()
		return
	}
	for _, c := range []struct {
		args, backend, want string
		status              int
	}{
		{"-m 0 -shapes 64x128", "", "-m", 2},
		{"-m 1 -shapes 64x128", "no-such-backend", "no-such-backend", 1},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExitStatus$")
		cmd.Env = append(os.Environ(), "QUANTA_BENCH_TEST_MAIN="+c.args)
		if c.backend != "" {
			cmd.Env = append(cmd.Env, "GOMLX_BACKEND="+c.backend)
		}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.status {
			t.Errorf("bench %s: exit %v; want status %d\n%s", c.args, err, c.status, out)
		}
		if !strings.HasPrefix(string(out), "bench: ") || !strings.Contains(string(out), c.want) ||
			strings.Contains(string(out), "panic") || strings.Contains(string(out), ".go:") {
			t.Errorf("bench %s: output %q; want one error line naming %s, no panic trace", c.args, out, c.want)
		}
	}
}

// TestOutputsReplacedWhole: -json, -markdown and -png are each replaced whole (a complete new file
// renamed over the old one), not rewritten in place, where an interrupted run left a truncated
// file.
func TestOutputsReplacedWhole(t *testing.T) {
	dir := t.TempDir()
	saved := [3]string{*flagJSON, *flagMarkdown, *flagPNG}
	defer func() { *flagJSON, *flagMarkdown, *flagPNG = saved[0], saved[1], saved[2] }()
	*flagJSON, *flagMarkdown, *flagPNG = filepath.Join(dir, "b.json"), filepath.Join(dir, "b.md"), filepath.Join(dir, "b.png")
	rep := &report{DType: "Float32", Results: []result{
		{Context: "chain", Shape: "8x8", Format: "dense", M: 1, MsPerProduct: 1, SpeedupVsDense: 1},
		{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, MsPerProduct: 0.5, SpeedupVsDense: 2},
	}}
	testutil.ReplacedWhole(t, func() error { return writeOutputs(rep, markdown(rep)) }, *flagJSON, *flagMarkdown, *flagPNG)
}

// TestNoTableWithoutData: results the JSON cannot carry are an error before any file is written;
// the markdown was written first, leaving a table without its data.
func TestNoTableWithoutData(t *testing.T) {
	dir := t.TempDir()
	saved := [2]string{*flagJSON, *flagMarkdown}
	defer func() { *flagJSON, *flagMarkdown = saved[0], saved[1] }()
	*flagJSON, *flagMarkdown = filepath.Join(dir, "b.json"), filepath.Join(dir, "b.md")
	rep := &report{Results: []result{{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, LimitFraction: math.Inf(1)}}}
	if err := writeOutputs(rep, markdown(rep)); err == nil {
		t.Errorf("writeOutputs of an infinite fraction: no error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("after the error the folder holds %v; want nothing written", entries)
	}
}

// TestCountsOutOfRange: -stream-bytes, -max-layers and -min-time out of range are each an error
// naming the flag and its value; one message named all three, whichever was wrong.
func TestCountsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		set  func()
		want string
	}{
		{func() { *flagStreamBytes = 0 }, "-stream-bytes 0"},
		{func() { *flagStreamBytes = -1 }, "-stream-bytes -1"},
		{func() { *flagMaxLayers = 1 }, "-max-layers 1"},
		{func() { *flagMaxLayers = -4 }, "-max-layers -4"},
		{func() { *flagMinTime = 0 }, "-min-time 0s"},
		{func() { *flagMinTime = -time.Second }, "-min-time -1s"},
	} {
		t.Run(c.want, func(t *testing.T) {
			stream, layers, minTime := *flagStreamBytes, *flagMaxLayers, *flagMinTime
			defer func() { *flagStreamBytes, *flagMaxLayers, *flagMinTime = stream, layers, minTime }()
			c.set()
			_, err := parseConfig()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("parseConfig() = %v; want an error naming %q", err, c.want)
			}
			for _, other := range []string{"-stream-bytes", "-max-layers", "-min-time"} {
				if err != nil && !strings.HasPrefix(c.want, other) && strings.Contains(err.Error(), other) {
					t.Errorf("parseConfig() = %v; names %s, which is in range", err, other)
				}
			}
		})
	}
}

// TestShapeNotStorable: a shape a requested format cannot store (a GGML block of 32 does not
// divide K = 30 of the transposed weight) is an error naming both before anything is measured;
// it was found once the formats before it had been measured on every shape before it.
func TestShapeNotStorable(t *testing.T) {
	formats, err := parseFormats("nf4,q4_0")
	if err != nil {
		t.Fatal(err)
	}
	pairs := []benchflags.Shape{{K: 64, N: 64}, {K: 64, N: 30}}
	for _, contexts := range [][]string{{"chain"}, {"add"}} {
		err := checkStorable(config{pairs: pairs, contexts: contexts, formats: formats, dtype: dtypes.Float32})
		if err == nil || !strings.Contains(err.Error(), "-formats q4_0 cannot store the 30x64 weight of -shapes 64x30") {
			t.Errorf("%v: checkStorable = %v; want an error naming q4_0 and 30x64", contexts, err)
		}
	}
	pairs = []benchflags.Shape{{K: 64, N: 64}, {K: 64, N: 32}}
	if err := checkStorable(config{pairs: pairs, contexts: []string{"chain", "add"}, formats: formats, dtype: dtypes.BFloat16}); err != nil {
		t.Errorf("64x64, 64x32: checkStorable = %v", err)
	}
}

// TestStrategyNotServing: a forced strategy that cannot serve a measured product (int8's weights
// have no product-table formulation; a GGML weight, contracted on its second axis, has no
// sliced-sum one) is an error naming the format, the strategy, the weight, the rows and what the
// strategy serves before anything is measured; it was found once the formats before it had been
// measured. Strategies that serve every product pass.
func TestStrategyNotServing(t *testing.T) {
	backend := testutil.Backend(t)
	pairs := []benchflags.Shape{{K: 64, N: 128}}
	for _, c := range []struct{ formats, want string }{
		{"nf4,int8@product-table", "-formats int8@product-table: strategy product-table cannot serve the product of 1 activation rows (-m) and the 64x128 weight (-shapes)"},
		{"q4_0@sliced-sum", "-formats q4_0@sliced-sum: strategy sliced-sum cannot serve the product of 1 activation rows (-m) and the 64x128 weight (-shapes)"},
	} {
		formats, err := parseFormats(c.formats)
		if err != nil {
			t.Fatal(err)
		}
		err = checkStrategies(backend, config{rows: []int{1, 4}, pairs: pairs, contexts: []string{"chain", "add"}, formats: formats, dtype: dtypes.Float32})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "serves") {
			t.Errorf("-formats %s: checkStrategies = %v; want an error containing %q and what the strategy serves", c.formats, err, c.want)
		}
	}
	formats, err := parseFormats("nf4@product-table,int8@sliced-sum,q4_0@decode-dot,binary1@materialize")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := checkStrategies(backend, config{rows: []int{1, 4}, pairs: pairs, contexts: []string{"chain", "add"}, formats: formats, dtype: dtypes.Float32}); err != nil {
		t.Errorf("checkStrategies = %v", err)
	}
	t.Logf("checked in %v", time.Since(start))
}

// TestOutputsDistinct: two of -json, -markdown and -png naming the same file are an error naming
// both flags before anything is measured; the later output replaced the earlier one after the
// measurements (the JSON lost under the tables), as examples/eval and conformance/peer refuse.
func TestOutputsDistinct(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results")
	for _, c := range []struct {
		a, b       *string
		keyA, keyB string
	}{{flagJSON, flagMarkdown, "-json", "-markdown"}, {flagJSON, flagPNG, "-json", "-png"}, {flagMarkdown, flagPNG, "-markdown", "-png"}} {
		oldA, oldB := *c.a, *c.b
		*c.a, *c.b = path, filepath.Join(filepath.Dir(path), ".", "results")
		_, err := parseConfig()
		*c.a, *c.b = oldA, oldB
		if err == nil || !strings.Contains(err.Error(), c.keyA) || !strings.Contains(err.Error(), c.keyB) {
			t.Errorf("%s and %s the same file: parseConfig() = %v; want an error naming both", c.keyA, c.keyB, err)
		}
	}
}
