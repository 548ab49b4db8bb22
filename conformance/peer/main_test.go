package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestMarkdownReplacedWhole: -markdown is replaced whole (a complete new file renamed over the old
// one), not rewritten in place, where an interrupted run left a truncated file.
func TestMarkdownReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peer.md")
	testutil.ReplacedWhole(t, func() error { return writeMarkdown(path, "| quanta variant | eformer |\n") }, path)
}

// TestCheckFlags: a count below 1, a value listed twice, a quanta variant bench refuses or that no
// eformer format matches, and a flag -reuse does not read are errors naming the flag before the
// harnesses run (eformer's ran first, for minutes: -layers -1 was measured as one layer, -formats
// nf4,nf4 twice, and -variants nf4,nf4 was refused by bench only after it).
func TestCheckFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", "0"}, "-k 0; accepted: >= 1"},
		{[]string{"-layers", "-1"}, "-layers -1; accepted: >= 1"},
		{[]string{"-layers-large", "0"}, "-layers-large 0; accepted: >= 1"},
		{[]string{"-m", "1,8,1"}, "-m: bad list"},
		{[]string{"-formats", "nf4,int8,nf4"}, `-formats: "nf4" listed twice`},
		{[]string{"-formats", "nf4,,int8"}, "an empty name"},
		{[]string{"-formats", "nf4,q4_0"}, `-formats: unknown eformer format "q4_0"; accepted: nf4, int8, ternary, dense`},
		{[]string{"-variants", "nf4,int8,nf4"}, `-variants: "nf4" listed twice`},
		{[]string{"-variants", "nf4@materialize,nf4@Materialize"}, `-variants: "nf4@Materialize" listed twice`},
		{[]string{"-variants", "nf4,bogus"}, `-variants: unknown format "bogus"`},
		{[]string{"-variants", "dense,nf4"}, `-variants: "dense"`},
		{[]string{"-variants", "nf4,dense-t"}, `-variants: "dense-t"; accepted: quantized formats (bench measures dense and dense-t first, always)`},
		{[]string{"-formats", "int8,dense", "-variants", "nf4"}, `-variants: "nf4" has no eformer format`},
		{[]string{"-reuse", "-m", "1", "-variants", "nf4"}, "-reuse with -m, -variants"},
		{[]string{"-reuse", "-k", "2048", "-layers", "4"}, "-reuse with -k, -layers"},
		{[]string{"-reuse", "-markdown", "x.md", "-quanta-json", "q.json"}, ""},
		{[]string{"-quanta-json", "out/a.json", "-eformer-json", "out/./a.json"}, "-eformer-json and -quanta-json both out/a.json"},
		{[]string{"-markdown", "bench-results/peer/quanta.json"}, "-quanta-json and -markdown both"},
		{[]string{"-markdown", ""}, "-markdown is empty"},
		{[]string{"-m", "1,8", "-formats", "nf4,dense", "-variants", "nf4,nf4@materialize"}, ""},
		{[]string{"-m", "1", "-formats", "nf4,int8,dense", "-variants", "nf4, int8"}, ""},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			testutil.CheckFlags(t, checkFlags, c.want, c.args...)
		})
	}
	t.Run("argument", func(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) })
}

// TestMarkdownFromFiles: the table's header gives the K and layer counts the files were measured
// with, not the flags' (peer -reuse after a run with -k 2048 printed K=N=4096), and files of
// different shapes are an error naming both, not ratios of unlike products.
func TestMarkdownFromFiles(t *testing.T) {
	var ef eformerReport
	var qu quantaReport
	if err := json.Unmarshal([]byte(`{"versions": {"eformer": "0.1", "jax": "0.5"}, "device": "cpu",
		"config": {"K": 2048, "N": 2048, "layers": 6, "layers_large": 3},
		"results": [{"format": "nf4", "M": 1, "K": 2048, "N": 2048, "layers": 6, "median_s": 0.002}]}`), &ef); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"backend": "xla", "environment": "test",
		"results": [{"context": "chain", "shape": "2048x2048", "format": "nf4", "m": 1, "ms_per_product": 1}]}`), &qu); err != nil {
		t.Fatal(err)
	}
	table, err := markdown(&ef, &qu)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"K=N=2048", "eformer chains 6 distinct layers for M<512 and 3 for M>=512", "| nf4 | nf4 | 1 / 2 = **0.50** |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	qu.Results[0].Shape = "4096x4096"
	if _, err := markdown(&ef, &qu); err == nil || !strings.Contains(err.Error(), "4096x4096") || !strings.Contains(err.Error(), "2048") {
		t.Errorf("files of different shapes: markdown = %v; want an error naming both", err)
	}
}

// TestReadJSONNamesFlag: a results file that is missing or not JSON is an error naming its flag
// (and -reuse for a missing one); it named only the path ("open bench-results/peer/eformer.json:
// no such file or directory").
func TestReadJSONNamesFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.SetFlags(t, "-reuse")
	var ef eformerReport
	if err := readJSON("-eformer-json", filepath.Join(dir, "missing.json"), &ef); err == nil ||
		!strings.Contains(err.Error(), "-eformer-json: open") || !strings.Contains(err.Error(), "-reuse") {
		t.Errorf("missing file: readJSON = %v; want an error naming -eformer-json and -reuse", err)
	}
	if err := readJSON("-quanta-json", bad, &ef); err == nil || !strings.Contains(err.Error(), "-quanta-json "+bad) {
		t.Errorf("bad file: readJSON = %v; want an error naming -quanta-json", err)
	}
}

// TestEformerFormatsAgree: the formats -formats accepts are those bench_peer.py's make_weights
// quantizes (its `fmt == "name"` branches).
func TestEformerFormatsAgree(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "bench_peer.py"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`fmt == "([^"]+)"`).FindAllStringSubmatch(string(script), -1) {
		names = append(names, m[1])
	}
	if len(names) == 0 {
		t.Fatal(`bench_peer.py has no fmt == "name" branch; has make_weights changed?`)
	}
	if got, want := slices.Sorted(slices.Values(eformerFormats)), slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
		t.Errorf("eformerFormats %v; bench_peer.py's make_weights quantizes %v", eformerFormats, names)
	}
}
