package runtime

import (
	"fmt"
	"strings"

	"github.com/janpfeifer/must"
	"github.com/quanta-ml/quanta/kernels"
)

// Kernels reports which of quanta's CPU kernels the process-wide backend can call (package
// kernels attached them when the backend started). The error is the backend's, when it failed to
// start; kernels that cannot serve it are reported, not returned as errors.
func Kernels() (*kernels.Report, error) {
	backend, err := Backend()
	if err != nil {
		return nil, err
	}
	report, _ := kernels.Attach(backend)
	return report, nil
}

// MustKernels is Kernels, but panics on error.
func MustKernels() *kernels.Report {
	return must.M1(Kernels())
}

// Environment describes, in one line, what a measurement runs on: the backend, its plugin (path,
// version, PJRT C API), quanta's kernels (how many registered, ISA and threads, or NONE and why)
// and XLA_FLAGS. Benchmarks print it in their headers and results, so that a run without the
// kernels never passes for one with them.
func Environment() (string, error) {
	info, err := Report()
	if err != nil {
		return "", err
	}
	report, err := Kernels()
	if err != nil {
		return "", err
	}
	parts := []string{"backend " + info.Config}
	if info.PluginPath != "" {
		parts = append(parts, fmt.Sprintf("plugin %s (%s, PJRT C API %s)", info.PluginPath, info.PluginVersion, info.PJRTVersion))
	}
	parts = append(parts, report.Summary(), fmt.Sprintf("XLA_FLAGS=%q", info.XLAFlags))
	return strings.Join(parts, "; "), nil
}

// MustEnvironment is Environment, but panics on error.
func MustEnvironment() string {
	return must.M1(Environment())
}
