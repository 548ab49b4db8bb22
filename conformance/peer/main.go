// Command peer runs the peer benchmark behind `make bench-peer`: eformer's quantized matmuls on JAX
// CPU (conformance/run.sh bench, i.e. conformance/bench_peer.py) and quanta's on GoMLX XLA CPU
// (go run ./bench), one after the other on the same machine and the same shapes, and writes one
// markdown table of ratios quanta time / eformer time per format and M (below 1: quanta is faster).
//
// Both harnesses measure a chain of distinct K×K weights, host activations in, host result out,
// and report the median time per product: eformer's y = y @ W_i over -layers weights (-layers-large
// for M >= 512), quanta's bench in its "chain" context (y = relu(y·W_i), with enough weights that
// every call streams at least 128 MiB). Both sides run XLA CPU, so the ratios compare the
// lowerings.
//
// Run it from the repository root:
//
//	go run ./conformance/peer [-m 1,8,64,512,2048] [-k 4096] [-markdown FILE]
//
// -eformer-json and -quanta-json name the intermediate files (kept); with -reuse, existing files are
// read instead of running the harnesses again (the flags of the measurement are then refused: the
// table's K and layer counts are the eformer file's, whose shape the quanta file's must match).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/quanta-ml/quanta/internal/benchflags"
	"github.com/quanta-ml/quanta/internal/benchsuite"
	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/fileio"
)

var (
	flagM           = flag.String("m", "1,8,64,512,2048", "comma-separated activation rows M")
	flagK           = flag.Int("k", 4096, "the weights' dimensions K×K")
	flagLayers      = flag.Int("layers", 8, "layers chained for M < 512 (eformer)")
	flagLayersLarge = flag.Int("layers-large", 2, "layers chained for M >= 512 (eformer)")
	flagFormats     = flag.String("formats", "nf4,int8,ternary,dense", "eformer formats (bench_peer.py --formats)")
	flagVariants    = flag.String("variants", "nf4,int8,ternary,nf4@materialize,int8@materialize,ternary@materialize",
		"quanta formats (go run ./bench -formats)")
	flagEformerJSON = flag.String("eformer-json", "bench-results/peer/eformer.json", "eformer results (written by run.sh bench)")
	flagQuantaJSON  = flag.String("quanta-json", "bench-results/peer/quanta.json", "quanta results (written by go run ./bench)")
	flagMarkdown    = flag.String("markdown", "bench-results/peer/peer.md", "write the table here too (stdout always gets it)")
	flagReuse       = flag.Bool("reuse", false, "read existing JSON files instead of running the harnesses")
)

// eformerFormats are the formats conformance/bench_peer.py measures (its make_weights; keep the
// two lists equal, TestEformerFormatsAgree reads the script): a name it does not know failed
// there, after the formats before it had been measured.
var eformerFormats = []string{"nf4", "int8", "ternary", "dense"}

// eformerReport is what bench_peer.py writes.
type eformerReport struct {
	Versions map[string]string `json:"versions"`
	Device   string            `json:"device"`
	Config   struct {
		K           int `json:"K"`
		Layers      int `json:"layers"`
		LayersLarge int `json:"layers_large"`
	} `json:"config"`
	Results []struct {
		Format  string  `json:"format"`
		M       int     `json:"M"`
		Layers  int     `json:"layers"`
		MedianS float64 `json:"median_s"`
	} `json:"results"`
}

// quantaReport is what go run ./bench -json writes.
type quantaReport struct {
	Backend     string `json:"backend"`
	Environment string `json:"environment"`
	Results     []struct {
		Shape        string  `json:"shape"`
		Format       string  `json:"format"`
		M            int     `json:"m"`
		MsPerProduct float64 `json:"ms_per_product"`
	} `json:"results"`
}

func main() {
	flag.Parse()
	cmdflags.Exit("peer", cmdflags.ExitUsage, checkFlags())
	if _, err := os.Stat(filepath.Join("conformance", "run.sh")); err != nil {
		fail(fmt.Errorf("run from the repository root (conformance/run.sh not found): %w", err))
	}
	for _, path := range []string{*flagEformerJSON, *flagQuantaJSON, *flagMarkdown} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fail(err)
		}
	}
	k := strconv.Itoa(*flagK)
	if !*flagReuse {
		run("conformance/run.sh", "bench", *flagEformerJSON, "--m", *flagM, "--k", k, "--n", k,
			"--layers", strconv.Itoa(*flagLayers), "--layers-large", strconv.Itoa(*flagLayersLarge), "--formats", *flagFormats)
		run("go", "run", "./bench", "-json", *flagQuantaJSON, "-m", *flagM, "-shapes", benchflags.Shape{K: *flagK, N: *flagK}.String(),
			"-contexts", "chain", "-formats", *flagVariants)
	}
	var ef eformerReport
	var qu quantaReport
	if err := readJSON("-eformer-json", *flagEformerJSON, &ef); err != nil {
		fail(err)
	}
	if err := readJSON("-quanta-json", *flagQuantaJSON, &qu); err != nil {
		fail(err)
	}
	table, err := markdown(&ef, &qu)
	if err != nil {
		fail(err)
	}
	fmt.Print(table)
	if err := writeMarkdown(*flagMarkdown, table); err != nil {
		fail(err)
	}
}

// writeMarkdown writes the table to path, replaced whole (fileio.WriteAtomic), so that an
// interrupted run leaves no truncated file.
func writeMarkdown(path, table string) error {
	return fileio.WriteAtomic("-markdown "+path, path, func(w io.Writer) error {
		_, err := io.WriteString(w, table)
		return err
	})
}

// checkFlags reports, naming the flag, a count below 1, an empty file or one named by two of
// -eformer-json, -quanta-json and -markdown (one would replace the other), a value listed twice
// in -m, -formats or -variants (it was measured twice, or refused by bench after eformer's run), an
// eformer format bench_peer.py does not know, a quanta variant bench does not know or without an eformer format to set it against (left out of
// the table after its run), the flags -reuse does not read, and an argument, before the
// harnesses run.
func checkFlags() error {
	if err := cmdflags.First(
		cmdflags.NoArguments(),
		cmdflags.AtLeast("-k", *flagK, 1, ""),
		cmdflags.AtLeast("-layers", *flagLayers, 1, ""),
		cmdflags.AtLeast("-layers-large", *flagLayersLarge, 1, ""),
	); err != nil {
		return err
	}
	if _, err := benchflags.ParseInts(*flagM); err != nil {
		return fmt.Errorf("-m: %w", err)
	}
	outputs := map[string]string{} // cleaned path: flag
	for _, out := range []struct{ key, path string }{{"-eformer-json", *flagEformerJSON}, {"-quanta-json", *flagQuantaJSON}, {"-markdown", *flagMarkdown}} {
		path := filepath.Clean(out.path)
		switch other, taken := outputs[path]; {
		case out.path == "":
			return fmt.Errorf("%s is empty; accepted: a file", out.key)
		case taken:
			return fmt.Errorf("%s and %s both %s; accepted: three files (one would replace the other)", other, out.key, out.path)
		}
		outputs[path] = out.key
	}
	if *flagReuse {
		var ignored []string
		flag.Visit(func(f *flag.Flag) {
			if f.Name != "reuse" && f.Name != "eformer-json" && f.Name != "quanta-json" && f.Name != "markdown" {
				ignored = append(ignored, "-"+f.Name)
			}
		})
		if len(ignored) > 0 {
			return fmt.Errorf("-reuse with %s; accepted: without them (-reuse reads the JSON files, measured with their own)", strings.Join(ignored, ", "))
		}
	}
	formats := strings.Split(*flagFormats, ",")
	for i, f := range formats {
		switch {
		case f == "":
			return fmt.Errorf("-formats %q: an empty name; accepted: comma-separated eformer formats", *flagFormats)
		case slices.Contains(formats[:i], f):
			return fmt.Errorf("-formats: %q listed twice; accepted: each format once", f)
		case !slices.Contains(eformerFormats, f):
			return fmt.Errorf("-formats: unknown eformer format %q; accepted: %s (conformance/bench_peer.py's)", f,
				strings.Join(eformerFormats, ", "))
		}
	}
	var parsed []benchsuite.Format // bench refuses one measured twice, however spelled
	for _, v := range strings.Split(*flagVariants, ",") {
		f, err := benchsuite.ParseFormat(v)
		switch {
		case err != nil:
			return fmt.Errorf("-variants: %w", err)
		case slices.ContainsFunc(parsed, f.Same):
			return fmt.Errorf("-variants: %q listed twice; accepted: each variant once", v)
		case f.IsDense():
			return fmt.Errorf("-variants: %q; accepted: quantized formats (bench measures %s first, always)", v,
				strings.Join(benchsuite.DenseNames(), " and "))
		case formatOf(f.Name, formats) == "":
			return fmt.Errorf("-variants: %q has no eformer format in -formats (%s) to compare it with", v, *flagFormats)
		}
		parsed = append(parsed, f)
	}
	return nil
}

func fail(err error) {
	cmdflags.Exit("peer", cmdflags.ExitFailure, err)
}

// run runs a command with the output on stderr (the table goes to stdout).
func run(name string, args ...string) {
	fmt.Fprintf(os.Stderr, "peer: %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("%s: %w", name, err))
	}
}

// readJSON decodes the JSON file at path, given by flag key, into v; an error names key and,
// for a missing file, -reuse, which reads files an earlier run wrote.
func readJSON(key, path string, v any) error {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && *flagReuse:
		return fmt.Errorf("%s: %w (-reuse reads the files of an earlier run: run without it first)", key, err)
	case err != nil:
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s %s: %w", key, path, err)
	}
	return nil
}

// formatOf returns the eformer format a quanta variant measures: the format itself or a name
// starting with it and a separator ("nf4", "nf4-fused", "int8 (axis -1)"); "" if none.
func formatOf(variant string, formats []string) string {
	for _, f := range formats {
		if variant == f {
			return f
		}
		if strings.HasPrefix(variant, f) && strings.ContainsAny(variant[len(f):len(f)+1], "-_ (/@") {
			return f
		}
	}
	return ""
}

// markdown builds the ratio table: one row per quanta variant that has an eformer format, one column
// per M; a cell is quanta ms / eformer ms = ratio. The header gives K and the layer counts from
// the eformer file, which the quanta file's shape must match.
func markdown(ef *eformerReport, qu *quantaReport) (string, error) {
	eMs := map[string]map[int]float64{}
	var formats []string
	for _, r := range ef.Results {
		if eMs[r.Format] == nil {
			eMs[r.Format] = map[int]float64{}
			formats = append(formats, r.Format)
		}
		eMs[r.Format][r.M] = r.MedianS * 1e3
	}
	type row struct {
		variant, format string
		ms              map[int]float64
	}
	var rows []*row
	byVariant := map[string]*row{}
	var ms []int
	shape := benchflags.Shape{K: ef.Config.K, N: ef.Config.K}.String()
	for _, r := range qu.Results {
		if r.Shape != shape {
			return "", fmt.Errorf("the quanta results measured %s %s, the eformer results K=N=%d: not the same products", r.Format, r.Shape, ef.Config.K)
		}
		f := formatOf(r.Format, formats)
		if f == "" {
			fmt.Fprintf(os.Stderr, "peer: quanta format %q has no eformer counterpart (formats %v); left out\n", r.Format, formats)
			continue
		}
		if byVariant[r.Format] == nil {
			byVariant[r.Format] = &row{variant: r.Format, format: f, ms: map[int]float64{}}
			rows = append(rows, byVariant[r.Format])
		}
		byVariant[r.Format].ms[r.M] = r.MsPerProduct
		if !slices.Contains(ms, r.M) {
			ms = append(ms, r.M)
		}
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("no quanta variant matches an eformer format %v", formats)
	}
	sort.Ints(ms)
	var sb strings.Builder
	fmt.Fprintf(&sb, "Peer benchmark: quanta (%s) vs eformer %s (jax %s, %s); K=N=%d, float32 activations.\n",
		qu.Backend, ef.Versions["eformer"], ef.Versions["jax"], ef.Device, ef.Config.K)
	fmt.Fprintf(&sb, "Cells: quanta ms / eformer ms per product = **ratio** (below 1: quanta is faster); eformer chains %d "+
		"distinct layers for M<512 and %d for M>=512, quanta enough that each call streams >= 128 MiB; host in and out, medians.\n\n",
		ef.Config.Layers, ef.Config.LayersLarge)
	fmt.Fprintf(&sb, "quanta's environment: %s.\n\n", qu.Environment)
	sb.WriteString("| quanta variant | eformer |")
	for _, m := range ms {
		fmt.Fprintf(&sb, " M=%d |", m)
	}
	sb.WriteString("\n|---|---|")
	for range ms {
		sb.WriteString("---|")
	}
	sb.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s |", r.variant, r.format)
		for _, m := range ms {
			q, okQ := r.ms[m]
			e, okE := eMs[r.format][m]
			if !okQ || !okE || e <= 0 {
				sb.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&sb, " %.3g / %.3g = **%.2f** |", q, e, q/e)
		}
		sb.WriteString("\n")
	}
	return sb.String(), nil
}
