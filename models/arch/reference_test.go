package arch_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math"
	"os"
	"path"
	goruntime "runtime"
	"sort"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/assets"
	"github.com/quanta-ml/quanta/internal/decodertest"
	"github.com/quanta-ml/quanta/internal/refdata"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/models"
	"github.com/quanta-ml/quanta/models/arch"
)

// llamacppIndex is reference/testdata/llamacpp/index.json (reference/gen_llamacpp.py).
type llamacppIndex struct {
	IDs map[string]struct {
		File   string `json:"file"`
		SHA256 string `json:"sha256_int32"`
	} `json:"ids"`
	Files map[string]llamacppFile `json:"files"`
}

type llamacppFile struct {
	Model              string    `json:"model"`
	Type               string    `json:"type"`
	File               string    `json:"file"`
	SHA256             string    `json:"sha256"`
	Perplexity         float64   `json:"perplexity"`
	WindowPerplexities []float64 `json:"window_perplexities"`
	F32                struct {
		Perplexity         float64   `json:"perplexity"`
		WindowPerplexities []float64 `json:"window_perplexities"`
	} `json:"f32_dequantized"`
}

func loadLlamaCppIndex(t *testing.T) llamacppIndex {
	t.Helper()
	var index llamacppIndex
	if err := refdata.JSON(&index, "llamacpp", "index.json"); err != nil {
		t.Fatal(err)
	}
	return index
}

// assetPath is where `make assets` (Q4_1, Gemma-3) or `make assets-quants` (the other SmolLM2
// types) puts a reference file.
func assetPath(f llamacppFile) string {
	switch {
	case f.Model == "gemma3":
		return assets.Gemma3
	case f.Type == "Q4_1":
		return assets.SmolLM2
	}
	return path.Join(assets.SmolLM2Quants, f.File)
}

// evalIDs returns the reference's ids of a model, checked against the digest the index records.
func evalIDs(t *testing.T, index llamacppIndex, model string) []int {
	t.Helper()
	ref, ok := index.IDs[model]
	if !ok {
		t.Fatalf("the index has no ids for %s", model)
	}
	dir, file := "llamacpp", ref.File
	if model == "smollm2" {
		dir, file = "smollm2", "eval_ids.npy"
	}
	ids, err := refdata.Ints(dir, file)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, id := range ids {
		_ = binary.Write(h, binary.LittleEndian, int32(id))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != ref.SHA256 {
		t.Fatalf("%s ids: sha256 %s, the index records %s", model, got, ref.SHA256)
	}
	return ids
}

// fileDigest is the sha256 of a file, hex.
func fileDigest(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// loadFile loads a GGUF model with every tensor as the file stores it (models.FilePreset).
func loadFile(t *testing.T, p string) (*context.Context, models.LanguageModel) {
	t.Helper()
	q := decodertest.Quantizer(t, models.FilePreset)
	ctx := context.New()
	m, err := arch.LoadGGUF(ctx, decodertest.OpenFile(t, p), arch.QuantizerOptions(q, testutil.Backend(t)))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, m
}

// quickFile is the file whose first window make test scores; the others, and both windows, run
// with QUANTA_TEST_ALL=1.
const quickFile = "smollm2/Q4_1"

// TestLlamaCppPerplexity scores each GGUF file of the reference (SmolLM2 in Q4_1 and in five
// types made by llama.cpp's quantizer, Gemma-3 270M in Q4_K_M) with every tensor as the file stores
// it, on llama.cpp's ids and windows, and compares the perplexity with llama.cpp's on the same
// values: its run of the file converted to F32 (the file's values exactly, with float products,
// as quanta computes them), within 0.1 %. llama.cpp's run of the quantized file itself quantizes
// the activations of each product to 8 bits (Q8_0, Q8_1, Q8_K); the test logs quanta's distance
// to it as well. A file that is absent (make assets, make assets-quants) or not the one the
// reference scored is skipped with one line.
func TestLlamaCppPerplexity(t *testing.T) {
	index := loadLlamaCppIndex(t)
	backend := testutil.Backend(t)
	keys := make([]string, 0, len(index.Files))
	for k := range index.Files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		ref := index.Files[key]
		t.Run(key, func(t *testing.T) {
			if key != quickFile {
				testutil.Slow(t)
			}
			if backend.String() == simplego.BackendName && os.Getenv(testutil.TestAllEnv) != "1" {
				t.Skipf("the pure-Go backend takes minutes per window: runs with %s=1", testutil.TestAllEnv)
			}
			p := assets.Require(t, assetPath(ref))
			if got := fileDigest(t, p); got != ref.SHA256 {
				t.Skipf("%s is not the file the reference scored (sha256 %s, reference %s): regenerate both with reference/llamacpp.sh", p, got, ref.SHA256)
			}
			ids := evalIDs(t, index, ref.Model)
			windows, err := models.StridedWindows(len(ids), 513, 512)
			if err != nil {
				t.Fatal(err)
			}
			want, llamaCpp := ref.F32.Perplexity, ref.Perplexity
			if key == quickFile && os.Getenv(testutil.TestAllEnv) != "1" {
				windows = windows[:1]
				want, llamaCpp = ref.F32.WindowPerplexities[0], ref.WindowPerplexities[0]
			}
			start := time.Now()
			ctx, m := loadFile(t, p)
			loaded := time.Since(start)
			nll := decodertest.NLL(t, backend, ctx, m, ids, windows)
			ppl := models.Perplexity(nll)
			t.Logf("%s (%d windows, %d predictions): perplexity %.4f; llama.cpp F32 of the same values %.4f (%+.3f %%), llama.cpp "+
				"on the file %.4f (%+.3f %%); load %s, evaluation %s", key, len(windows), len(nll), ppl, want, 100*(ppl/want-1),
				llamaCpp, 100*(ppl/llamaCpp-1), loaded.Round(time.Millisecond), (time.Since(start) - loaded).Round(time.Millisecond))
			if math.Abs(ppl/want-1) > 1e-3 {
				t.Errorf("perplexity %.4f is %+.3f %% from llama.cpp's %.4f on the same values; the bound is 0.1 %%", ppl, 100*(ppl/want-1), want)
			}
		})
	}
}

// TestLoadAllocates: loading a GGUF file with every tensor as stored allocates in Go (in all,
// freed or not) at most 1.2 times the file's size: the blocks are read once into their tensors,
// and only the norms and the fused groups' stacking add to them. On a backend that shares host
// memory with its device (XLA CPU, the pure-Go backend) the blocks are read straight into their
// device buffers, so Go allocates a small fraction of the file, and the variables hold the file
// once.
func TestLoadAllocates(t *testing.T) {
	backend := testutil.Backend(t)
	for _, name := range []string{assets.SmolLM2, assets.Gemma3} {
		for _, tc := range []struct {
			where   string
			backend backends.Backend
			bound   float64 // of the file's size
		}{
			{"local", nil, 1.2},
			{"on the device", backend, 0.2},
		} {
			t.Run(path.Base(name)+"/"+tc.where, func(t *testing.T) {
				bound := tc.bound
				if tc.backend != nil && !tc.backend.HasSharedBuffers() {
					t.Skipf("%s shares no host memory with its device", tc.backend.Name())
				}
				if tc.backend != nil && tc.backend.Name() != "xla" {
					bound = 1.2 // the pure-Go backend's device buffers are Go memory
				}
				p := assets.Require(t, name)
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				f := decodertest.OpenFile(t, p)
				q := decodertest.Quantizer(t, models.FilePreset)
				ctx := context.New()
				limit := uint64(bound * float64(st.Size()))
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				if _, err = arch.LoadGGUF(ctx, f, arch.QuantizerOptions(q, tc.backend)); err != nil {
					t.Fatal(err)
				}
				goruntime.ReadMemStats(&after)
				allocated := after.TotalAlloc - before.TotalAlloc
				t.Logf("%s: %d bytes; loading allocated %d (%.3fx), the context holds %d", path.Base(name), st.Size(), allocated,
					float64(allocated)/float64(st.Size()), ctx.Memory())
				if allocated > limit {
					t.Errorf("loading allocated %d bytes; the bound is %d (%.1fx the file)", allocated, limit, bound)
				}
				if mem := ctx.Memory(); uintptr(mem) > uintptr(1.2*float64(st.Size())) || mem < uintptr(st.Size())*9/10 {
					t.Errorf("the context holds %d bytes for a file of %d; want about the file's size", mem, st.Size())
				}
				releaseContext(ctx)
			})
		}
	}
}

// releaseContext frees the variables' buffers now rather than at garbage collection.
func releaseContext(ctx *context.Context) {
	for v := range ctx.IterVariables() {
		if t, err := v.Value(); err == nil && t != nil {
			_ = t.FinalizeAll()
		}
	}
}
