//go:build !linux

package runtime

import (
	goruntime "runtime"

	"github.com/pkg/errors"
)

// preloadLibrary fails: the CUDA wheels' libraries are preloaded on Linux only.
func preloadLibrary(path string) error {
	return errors.Errorf("preloading %q: not supported on %s", path, goruntime.GOOS)
}
