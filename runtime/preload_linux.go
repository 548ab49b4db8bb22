//go:build linux

package runtime

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	"github.com/pkg/errors"
)

// preloadLibrary loads the shared library at path (dlopen RTLD_NOW|RTLD_LOCAL, as Python's ctypes
// does for JAX) and keeps it loaded, so that later lookups of its soname find this copy.
func preloadLibrary(path string) error {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	if handle := C.dlopen(cPath, C.RTLD_NOW|C.RTLD_LOCAL); handle == nil {
		return errors.Errorf("dlopen %q: %s", path, C.GoString(C.dlerror()))
	}
	return nil
}
