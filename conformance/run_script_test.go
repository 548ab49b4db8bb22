package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestRunScriptRandomRelativeDir: `conformance/run.sh random N SEED DIR` with a relative DIR, run
// from another folder than the repository root, writes eformer's cases into DIR under the
// caller's folder and compares them from there (the comparison looked for DIR under the
// repository root: "open DIR/cases.jsonl: no such file or directory"). A fake virtualenv, whose
// python writes the first 3 cases of the committed sample, stands for eformer.
func TestRunScriptRandomRelativeDir(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("needs sha256sum")
	}
	sample, err := filepath.Abs(randomSampleDir)
	if err != nil {
		t.Fatal(err)
	}
	req, err := os.ReadFile("requirements.txt")
	if err != nil {
		t.Fatal(err)
	}
	venv := t.TempDir()
	sum := sha256.Sum256(req)
	if err := os.WriteFile(filepath.Join(venv, ".quanta-requirements"), []byte(hex.EncodeToString(sum[:])+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(venv, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// gen_random.py --n N --seed SEED --out DIR: the sample's header with n 3, and its first 3 cases.
	python := `#!/usr/bin/env bash
set -e
while [ $# -gt 0 ]; do if [ "$1" = --out ]; then out=$2; fi; shift; done
mkdir -p "$out"
head -n 1 '` + sample + `/cases.jsonl' | sed 's/"n": 300,/"n": 3,/' >"$out/cases.jsonl"
sed -n 2,4p '` + sample + `/cases.jsonl' >>"$out/cases.jsonl"
cp '` + sample + `/arrays.bin' "$out/arrays.bin"
`
	if err := os.WriteFile(filepath.Join(venv, "bin", "python"), []byte(python), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	cmd := exec.Command("bash", script, "random", "3", "101", "rel/out")
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "QUANTA_REF_VENV="+venv)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run.sh random with a relative DIR from another folder: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(cwd, "rel", "out", "cases.jsonl")); err != nil {
		t.Errorf("the cases are not under the caller's folder: %v\n%s", err, out)
	}
}
