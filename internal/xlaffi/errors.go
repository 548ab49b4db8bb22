package xlaffi

import "errors"

// Sentinel errors, one per condition; test with errors.Is.
var (
	// ErrPluginNotLoaded: no library of that path is loaded in this process (xlaffi never loads one).
	ErrPluginNotLoaded = errors.New("PJRT plugin not loaded in this process")

	// ErrNotPJRT: the library has no GetPjrtApi.
	ErrNotPJRT = errors.New("not a PJRT plugin")

	// ErrNoFFIExtension: the plugin's PJRT_Api has no FFI extension.
	ErrNoFFIExtension = errors.New("PJRT plugin has no FFI extension")

	// ErrVersion: the plugin's PJRT C API or XLA FFI API, or a handler's answer, is not a
	// version xlaffi accepts.
	ErrVersion = errors.New("unsupported PJRT or XLA FFI API version")

	// ErrLayout: a struct the plugin reports is smaller than xlaffi's declaration of it.
	ErrLayout = errors.New("PJRT or XLA FFI struct smaller than expected")

	// ErrInvalidHandler: a bad target name, a nil function, or a handler that does not answer
	// XLA's metadata query.
	ErrInvalidHandler = errors.New("invalid FFI handler")

	// ErrDuplicate: the target is already registered with another function.
	ErrDuplicate = errors.New("FFI target already registered")

	// ErrRegister: the plugin's register_handler returned an error.
	ErrRegister = errors.New("FFI handler registration failed")
)

// joinErrors returns nil for no errors, the error itself for one, errors.Join otherwise.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
