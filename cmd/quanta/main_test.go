package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/quanta-ml/quanta/internal/testutil"
	"github.com/quanta-ml/quanta/runtime"
)

// childEnv makes the test binary act as the quanta command (see TestMain), so that doctor
// runs in a fresh process that reads its environment afresh.
const childEnv = "QUANTA_CMD_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // what the message says was wrong
	}{
		{"no command", nil, exitUsage, "quanta: no command"},
		{"unknown command", []string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{"extra argument", []string{"doctor", "now"}, exitUsage, `"doctor" takes no arguments; got ["now"]`},
		{"help unknown command", []string{"help", "bogus"}, exitUsage, `quanta help: unknown command "bogus"`},
		{"help two commands", []string{"help", "run", "doctor"}, exitUsage, `"help" takes no arguments or one command; got ["run" "doctor"]`},
		{"help", []string{"help"}, exitOK, ""},
		{"doctor help", []string{"doctor", "-h"}, exitOK, ""},
		{"doctor --help", []string{"doctor", "--help"}, exitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.wantCode {
				t.Errorf("run(%q) = %d, want %d", tc.args, code, tc.wantCode)
			}
			if !strings.Contains(stdout.String()+stderr.String(), "usage: quanta") {
				t.Errorf("run(%q) printed no usage: stdout %q, stderr %q", tc.args, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("run(%q): stderr %q does not say %q", tc.args, stderr.String(), tc.want)
			}
		})
	}
}

// TestHelp: the help asked for goes to stdout with exit 0, as `quanta -h` and `quanta help`
// always did, quanta run's flags included; a help that cannot be written is a failure (exit 1,
// named on stderr), not a silent success.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "usage: quanta <command>"},
		{[]string{"--help"}, "usage: quanta <command>"},
		{[]string{"help"}, "usage: quanta <command>"},
		{[]string{"help", "doctor"}, "doctor "},
		{[]string{"help", "run"}, "usage: quanta run"},
		{[]string{"help", "run"}, "-repeat-penalty"},
		{[]string{"help", "help"}, "help [command]"},
		{[]string{"doctor", "-h"}, "usage: quanta <command>"},
		{[]string{"run", "-h"}, "usage: quanta run"},
		{[]string{"run", "-help"}, "-repeat-penalty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), tc.want) || stderr.Len() != 0 {
				t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 0, stdout with %q, no stderr", tc.args, code, stdout.String(), stderr.String(), tc.want)
			}
			stderr.Reset()
			if code := run(tc.args, failingWriter{}, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "writing the help: no space left on device") {
				t.Errorf("run(%q) on a failing stdout = %d, stderr %q; want %d and the write error", tc.args, code, stderr.String(), exitFailure)
			}
		})
	}
}

// runChild runs `quanta args...` in a child process with the environment changed by set
// ("KEY=value") and unset, and returns its exit code, stdout and stderr.
func runChild(t *testing.T, set, unset []string, args ...string) (int, string, string) {
	t.Helper()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		key, _, _ := strings.Cut(kv, "=")
		return slices.Contains(unset, key) || slices.ContainsFunc(set, func(s string) bool { return strings.HasPrefix(s, key+"=") })
	})
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(env, set...), childEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), stdout.String(), stderr.String()
	default:
		t.Fatalf("running %q: %v", args, err)
		return -1, "", ""
	}
}

func TestDoctor(t *testing.T) {
	testutil.Backend(t)
	info := runtime.MustReport()
	onXLACPU := runtime.IsXLA(runtime.MustBackend()) && info.PluginName == "cpu"
	empty := t.TempDir()
	renamed := filepath.Join(t.TempDir(), "lammps.so") // the CPU plugin under a name go-xla gives no platform
	if onXLACPU {
		if err := os.Symlink(info.PluginPath, renamed); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		set, unset  []string
		needXLACPU  bool
		wantCode    int
		wantStdout  []string
		wantStderr  string // substring of the stderr output; "" wants none
		stderrLines int
	}{
		{
			name:       "as configured",
			wantCode:   map[bool]int{true: exitFallback, false: exitOK}[info.Fallback],
			wantStdout: []string{"backend:      " + info.Config, "check:        ok"},
		},
		{
			name:       "QUANTA_CPU_DEVICES=4",
			set:        []string{runtime.CPUDevicesEnv + "=4"},
			needXLACPU: true,
			wantCode:   exitOK,
			wantStdout: []string{"devices:      4 (QUANTA_CPU_DEVICES=4)", "  #3: ", "check:        ok"},
		},
		{
			name:       "QUANTA_CPU_DEVICES=2",
			set:        []string{runtime.CPUDevicesEnv + "=2"},
			needXLACPU: true,
			wantCode:   exitOK,
			wantStdout: []string{"devices:      2 (QUANTA_CPU_DEVICES=2)", "  #1: "},
		},
		{
			name:       "CPU plugin under another file name: kernels",
			set:        []string{backends.ConfigEnvVar + "=xla:" + renamed},
			unset:      []string{runtime.CPUDevicesEnv},
			needXLACPU: true,
			wantCode:   exitOK,
			wantStdout: []string{" registered (PJRT C API ", "kernel probe: ok"},
		},
		{
			name:        "plugin hidden: fallback",
			set:         []string{pjrt.PJRTPluginPathsEnv + "=" + empty, "HOME=" + empty},
			unset:       []string{backends.ConfigEnvVar, runtime.CPUDevicesEnv},
			wantCode:    exitFallback,
			wantStdout:  []string{"backend:      go ", "plugin:       none", "fallback:     yes", "check:        ok"},
			wantStderr:  "quanta: XLA PJRT plugin not found",
			stderrLines: 1,
		},
		{
			name:        "invalid QUANTA_CPU_DEVICES",
			set:         []string{runtime.CPUDevicesEnv + "=many", backends.ConfigEnvVar + "=xla:cpu"},
			wantCode:    exitFailure,
			wantStderr:  `invalid QUANTA_CPU_DEVICES="many"`,
			stderrLines: 1,
		},
		{
			// The variable applies to the XLA CPU plugin only, invalid or not (runtime's doc).
			name:       "invalid QUANTA_CPU_DEVICES off XLA CPU",
			set:        []string{runtime.CPUDevicesEnv + "=abc", backends.ConfigEnvVar + "=go"},
			wantCode:   exitOK,
			wantStdout: []string{`QUANTA_CPU_DEVICES="abc" ignored: it applies to the XLA CPU plugin only`, "check:        ok"},
		},
		{
			// Ignored, a valid value does not explain the device count either.
			name:       "QUANTA_CPU_DEVICES off XLA CPU",
			set:        []string{runtime.CPUDevicesEnv + "=3", backends.ConfigEnvVar + "=go"},
			wantCode:   exitOK,
			wantStdout: []string{"devices:      1\n", "QUANTA_CPU_DEVICES=3 ignored: it applies to the XLA CPU plugin only"},
		},
		{
			// GoMLX's plugin options are GoMLX's: an unknown one is logged and ignored, as in any
			// GoMLX program (runtime's doc).
			name:        "unknown plugin option",
			set:         []string{backends.ConfigEnvVar + "=xla:cpu,foo=1"},
			unset:       []string{runtime.CPUDevicesEnv},
			needXLACPU:  true,
			wantCode:    exitOK,
			wantStdout:  []string{"backend:      xla:cpu,foo=1 (set by $GOMLX_BACKEND)", "check:        ok"},
			wantStderr:  `unknown plugin options ["foo=1"]`,
			stderrLines: 1,
		},
		{
			name:        "unknown GOMLX_BACKEND",
			set:         []string{backends.ConfigEnvVar + "=nosuchbackend"},
			wantCode:    exitFailure,
			wantStderr:  `can't find backend "nosuchbackend"`,
			stderrLines: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needXLACPU && !onXLACPU {
				t.Skipf("needs the XLA CPU plugin; backend is %q", info.Config)
			}
			code, stdout, stderr := runChild(t, tc.set, tc.unset, "doctor")
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout does not contain %q", want)
				}
			}
			if tc.wantStderr == "" && stderr != "" || !strings.Contains(stderr, tc.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tc.wantStderr)
			}
			if lines := strings.Count(stderr, "\n"); tc.stderrLines > 0 && lines != tc.stderrLines {
				t.Errorf("stderr has %d lines, want %d: %q", lines, tc.stderrLines, stderr)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s", stdout)
			}
		})
	}
}

// TestDoctorWriteError: a report that cannot be written (a full disk, a closed file) is an error
// (exit 1, named on stderr), not a success that a script reading the report would trust.
func TestDoctorWriteError(t *testing.T) {
	testutil.Backend(t)
	var stderr bytes.Buffer
	code := run([]string{"doctor"}, failingWriter{}, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "quanta doctor: writing the report: no space left on device") {
		t.Errorf("exit code %d, want %d and the write error; stderr:\n%s", code, exitFailure, stderr.String())
	}
}

// TestDoctorProbeFailure: where the kernels register with the backend but their probe (one custom
// call) fails, the products built on it would call them: doctor says so on stdout and stderr and
// exits 1, so that scripts/setup-xla.sh, which checks doctor's exit status, does not keep the
// plugin as working.
func TestDoctorProbeFailure(t *testing.T) {
	backend := testutil.Backend(t)
	if err := runtime.MustKernels().Err(); err != nil {
		t.Skipf("the kernels do not serve %s: doctor runs no probe (%v)", backend.Name(), err)
	}
	saved := probe
	defer func() { probe = saved }()
	probe = func(backends.Backend) error {
		return errors.New("kernels.Probe: the probe returned [0 0 0], want its input [1 -2 3.5]")
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"doctor"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stdout.String(), "kernel probe: failed\n") ||
		!strings.Contains(stderr.String(), "quanta doctor: kernels.Probe: the probe returned [0 0 0]") {
		t.Errorf("exit code %d, want %d, stdout saying the probe failed, stderr naming why; stdout:\n%s\nstderr:\n%s",
			code, exitFailure, stdout.String(), stderr.String())
	}
}
