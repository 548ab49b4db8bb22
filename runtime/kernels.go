package runtime

import (
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
