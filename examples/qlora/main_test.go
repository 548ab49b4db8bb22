package main

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/qlayers"
)

// TestFlagsOutOfRange: each flag out of range is an error naming it, before anything runs
// (-memory-dim -1 would fail in the measuring child, -rank 0 only after the pre-training, and an
// unknown -memory-mode would run as nf4-dq).
func TestFlagsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		set  func()
		want string
	}{
		{func() { *flagHidden = 0 }, "-hidden 0"},
		{func() { *flagHidden = -4 }, "-hidden -4"},
		{func() { *flagRank = 0 }, "-rank 0"},
		{func() { *flagRank = 3_000_000_000 }, "-rank 3000000000"},
		{func() { *flagAlpha = math.NaN() }, "-alpha NaN"},
		{func() { *flagAlpha = -1 }, "-alpha -1"},
		{func() { *flagAlpha = math.Inf(1) }, "-alpha +Inf"},
		{func() { *flagDropout = -0.5 }, "-dropout -0.5"},
		{func() { *flagDropout = math.NaN() }, "-dropout NaN"},
		{func() { *flagMemDim = -1 }, "-memory-dim -1"},
		{func() { *flagMemLayers = 0 }, "-memory-layers 0"},
		{func() { *flagMemMode = "nf4" }, `-memory-mode "nf4"`},
	} {
		t.Run(c.want, func(t *testing.T) {
			hidden, rank, alpha, dropout, dim, layers, mode := *flagHidden, *flagRank, *flagAlpha, *flagDropout, *flagMemDim, *flagMemLayers, *flagMemMode
			defer func() {
				*flagHidden, *flagRank, *flagAlpha, *flagDropout, *flagMemDim, *flagMemLayers, *flagMemMode = hidden, rank, alpha, dropout, dim, layers, mode
			}()
			if err := checkFlags(); err != nil {
				t.Fatalf("defaults: %v", err)
			}
			c.set()
			if err := checkFlags(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("checkFlags() = %v; want an error naming %q", err, c.want)
			}
		})
	}
	for _, mode := range memModes {
		saved := *flagMemMode
		*flagMemMode = mode
		if err := checkFlags(); err != nil {
			t.Errorf("-memory-mode %s: %v", mode, err)
		}
		*flagMemMode = saved
	}
}

// TestArguments: an argument is an error naming it, before anything runs; it was ignored, and
// with it every flag after it (flag parsing stops at the first argument).
func TestArguments(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) }

// TestOutputsChecked: a -plot or -adapters that cannot be written is an error naming the flag in
// the flag check (exit 2, a refused command line), before the data loads and the training.
func TestOutputsChecked(t *testing.T) {
	data := *flagData
	defer func() { *flagData = data }()
	*flagData = filepath.Join(t.TempDir(), "missing")
	testutil.OutputsChecked(t, checkFlags, map[string]*string{"-plot": flagPlot, "-adapters": flagAdapters})
}

// TestOutputsNotCheckedMeasuring: the memory measurement writes neither -plot nor -adapters, so
// the flag check leaves their paths alone (no directory created for them).
func TestOutputsNotCheckedMeasuring(t *testing.T) {
	testutil.SetFlags(t, "-memory")
	plot, adapters := *flagPlot, *flagAdapters
	defer func() { *flagPlot, *flagAdapters = plot, adapters }()
	dir := filepath.Join(t.TempDir(), "missing")
	*flagPlot, *flagAdapters = filepath.Join(dir, "curves.png"), filepath.Join(dir, "adapters")
	if err := checkFlags(); err != nil {
		t.Fatalf("-memory: checkFlags() = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("-memory: checkFlags() created %s (stat: %v)", dir, err)
	}
}

// TestPlotReplacedWhole: -plot is replaced whole (a complete new file renamed over the old one),
// not rewritten in place, where an interrupted run left a truncated file.
func TestPlotReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curves.png")
	c := curves{loss: []point{{1, 1.5}, {2, 1.2}}, acc: []point{{2, 0.8}}}
	testutil.ReplacedWhole(t, func() error { return plotCurves(path, []named{{"QLoRA", c}, {"LoRA", c}}) }, path)
}

// TestMemoryWithTrainingFlags: -memory measures its own model (-memory-dim, -memory-layers, rank
// 16, seed 1); a training flag given with it is an error naming it, not silently ignored, and so
// is a -memory flag given without -memory. (The flag package remembers which flags a parse set.)
func TestMemoryWithTrainingFlags(t *testing.T) {
	memory, rank, plot, dim, layers := *flagMemory, *flagRank, *flagPlot, *flagMemDim, *flagMemLayers
	defer func() {
		*flagMemory, *flagRank, *flagPlot, *flagMemDim, *flagMemLayers = memory, rank, plot, dim, layers
		resetVisited()
	}()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-memory", "-rank", "32", "-plot", "x.png"}, "-memory with -plot, -rank"},
		{[]string{"-memory-dim", "512"}, "-memory-dim without -memory"},
	} {
		resetVisited()
		*flagMemory = false
		if err := flag.CommandLine.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if err := checkFlags(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: checkFlags() = %v; want an error naming %q", c.args, err, c.want)
		}
	}
	resetVisited()
	if err := flag.CommandLine.Parse([]string{"-memory", "-memory-dim", "512", "-memory-layers", "2"}); err != nil {
		t.Fatal(err)
	}
	if err := checkFlags(); err != nil {
		t.Errorf("-memory -memory-dim 512 -memory-layers 2: %v", err)
	}
}

// resetVisited forgets which flags a parse set (flag.Visit's), restoring none.
func resetVisited() {
	fs := flag.NewFlagSet(os.Args[0], flag.ContinueOnError)
	flag.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	flag.CommandLine = fs
}

// TestCopyAdaptersRandomState: the LoRA run gets the QLoRA run's adapters, their scale and its
// random state, so that with -dropout both train with the same masks.
func TestCopyAdaptersRandomState(t *testing.T) {
	src, dst := context.New(), context.New()
	dense := src.In("hidden_0").In(qlayers.Scope)
	dense.VariableWithValue(qlayers.LoRAAName, [][]float32{{1, 2}})
	dense.VariableWithValue(qlayers.LoRABName, [][]float32{{3}, {4}})
	dense.SetParam(qlayers.LoRAScaleParam, 2.0)
	state := []uint64{7, 8, 9}
	src.InAbsPath(context.RootScope).VariableWithValue(context.RNGStateVariableName, state)
	if err := copyAdapters(src, dst); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{qlayers.LoRAAName, qlayers.LoRABName} {
		if dst.In("hidden_0").In(qlayers.Scope).GetVariable(name) == nil {
			t.Errorf("%s not copied", name)
		}
	}
	if s, _ := dst.In("hidden_0").In(qlayers.Scope).GetParam(qlayers.LoRAScaleParam); s != 2.0 {
		t.Errorf("scale %v, want 2", s)
	}
	rng := dst.GetVariableByScopeAndName(context.RootScope, context.RNGStateVariableName)
	if rng == nil {
		t.Fatal("random state not copied")
	}
	if got := tensors.MustCopyFlatData[uint64](rng.MustValue()); !slices.Equal(got, state) {
		t.Errorf("random state %v, want %v", got, state)
	}
}
