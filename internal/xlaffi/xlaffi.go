package xlaffi

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "plugin.h"
#include "qffi.h"
*/
import "C"

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"unsafe"

	"github.com/janpfeifer/must"
	"github.com/pkg/errors"
)

const (
	// HostPlatform is the XLA platform name CPU handlers are registered for (XLA canonicalizes
	// "cpu" to it).
	HostPlatform = "Host"

	// ProbeTarget is the target Open registers: quanta's probe handler, whose metadata answer
	// tells Open the plugin's XLA FFI API version. Called, it copies its one operand to its one
	// result (same dtype and size), so a graph can check the whole path end to end.
	ProbeTarget = "quanta_ffi_probe"

	// MinPJRTMinor is the oldest PJRT C API minor version (major 0) whose FFI extension takes the
	// handler-registration arguments in the layout xlaffi declares (no api_version field): the one
	// verified, 0.115. Older plugins took a different layout and are refused.
	MinPJRTMinor = 115

	// minFFIExtensionSize is the size of the FFI extension struct up to register_handler.
	minFFIExtensionSize = 48
)

// ABIVersion is the XLA FFI API version quanta's handlers are written against (qffi.h's
// QFFI_ABI_MAJOR.QFFI_ABI_MINOR) and the only one Open accepts.
var ABIVersion = Version{Major: C.QFFI_ABI_MAJOR, Minor: C.QFFI_ABI_MINOR}

// Version is a major.minor API version.
type Version struct{ Major, Minor int }

// String returns "major.minor".
func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Handler is a typed XLA FFI handler to register under a custom-call target name.
type Handler struct {
	// Target is the custom-call target name (stablehlo.custom_call @Target): letters, digits, '_'
	// and '.', not starting with a digit. quanta's kernels are named "quanta_<what>".
	Target string

	// Fn points to the C handler, `qffi_error* fn(qffi_frame*)`, defined with qffi.h's
	// QFFI_HANDLER: unsafe.Pointer(C.qffi_handler(C.fn)).
	Fn unsafe.Pointer
}

// Plugin is a loaded PJRT plugin whose FFI extension accepts quanta's handlers. There is one per
// plugin library in the process (the FFI registry it fills is process-wide): Open returns the
// same value for the same library.
type Plugin struct {
	path   string
	c      C.xf_plugin
	pjrt   Version
	ffi    Version
	ffiAPI unsafe.Pointer

	mu       sync.Mutex
	handlers map[string]unsafe.Pointer
}

// plugins holds the plugins opened, by PJRT_Api address.
var plugins = struct {
	sync.Mutex
	byAPI map[unsafe.Pointer]*Plugin
}{byAPI: map[unsafe.Pointer]*Plugin{}}

var reTarget = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Open returns the plugin loaded from path in this process (by go-xla, when GoMLX's XLA backend
// started on it), after checking that its FFI extension accepts quanta's handlers: PJRT C API
// 0.MinPJRTMinor or later, an FFI extension of the expected size, and XLA FFI API ABIVersion
// (learned by registering ProbeTarget). It never loads a library. Errors: ErrPluginNotLoaded,
// ErrNotPJRT, ErrNoFFIExtension, ErrVersion, ErrLayout.
func Open(path string) (*Plugin, error) {
	cPath := C.CString(path)
	defer C.free(unsafe.Pointer(cPath))
	var c C.xf_plugin
	var msg [512]C.char
	switch C.xf_open(cPath, &c, &msg[0], C.size_t(len(msg))) {
	case 1:
		return nil, errors.Wrapf(ErrPluginNotLoaded, "xlaffi: %q (%s)", path, C.GoString(&msg[0]))
	case 2:
		return nil, errors.Wrapf(ErrNotPJRT, "xlaffi: %q (%s)", path, C.GoString(&msg[0]))
	}
	plugins.Lock()
	defer plugins.Unlock()
	if p := plugins.byAPI[c.api]; p != nil {
		return p, nil
	}
	p := &Plugin{path: path, c: c, pjrt: Version{int(c.pjrt_major), int(c.pjrt_minor)},
		handlers: map[string]unsafe.Pointer{}}
	if err := p.check(); err != nil {
		return nil, err
	}
	plugins.byAPI[c.api] = p
	return p, nil
}

// MustOpen is Open, but panics on error.
func MustOpen(path string) *Plugin {
	return must.M1(Open(path))
}

// check verifies the plugin's versions and layouts, and registers the probe.
func (p *Plugin) check() error {
	if p.pjrt.Major != 0 || p.pjrt.Minor < MinPJRTMinor {
		return errors.Wrapf(ErrVersion, "xlaffi: %q implements PJRT C API %s; accepted: 0.%d or later (the FFI "+
			"extension's handler registration had another layout before)", p.path, p.pjrt, MinPJRTMinor)
	}
	if p.c.ffi == nil {
		return errors.Wrapf(ErrNoFFIExtension, "xlaffi: %q (PJRT C API %s) has no FFI extension in its "+
			"extension chain", p.path, p.pjrt)
	}
	if p.c.ffi_size < minFFIExtensionSize {
		return errors.Wrapf(ErrLayout, "xlaffi: %q: FFI extension is %d bytes, without register_handler; want >= %d",
			p.path, p.c.ffi_size, minFFIExtensionSize)
	}
	C.xf_probe_reset()
	if err := p.register(ProbeTarget, C.xf_probe()); err != nil {
		return err
	}
	var api unsafe.Pointer
	var apiSize C.size_t
	var major, minor C.int
	if C.xf_probe_seen(&api, &apiSize, &major, &minor) == 0 {
		return errors.Wrapf(ErrVersion, "xlaffi: %q did not ask %s for its metadata at registration: its XLA FFI "+
			"predates the metadata handshake of API %s", p.path, ProbeTarget, ABIVersion)
	}
	p.ffi, p.ffiAPI = Version{int(major), int(minor)}, api
	if p.ffi != ABIVersion {
		return errors.Wrapf(ErrVersion, "xlaffi: %q runs XLA FFI API %s; quanta's handlers are written against %s "+
			"(qffi.h): re-verify qffi.h's layouts against that version before accepting it", p.path, p.ffi, ABIVersion)
	}
	if apiSize < C.QFFI_API_POOL_SIZE {
		return errors.Wrapf(ErrLayout, "xlaffi: %q: XLA FFI API table is %d bytes; qffi.h reads %d", p.path, apiSize,
			C.QFFI_API_POOL_SIZE)
	}
	p.handlers[ProbeTarget] = unsafe.Pointer(C.xf_probe())
	return nil
}

// register calls the extension's register_handler.
func (p *Plugin) register(target string, fn unsafe.Pointer) error {
	cTarget, cPlatform := C.CString(target), C.CString(HostPlatform)
	defer C.free(unsafe.Pointer(cTarget))
	defer C.free(unsafe.Pointer(cPlatform))
	var msg [1024]C.char
	if C.xf_register(&p.c, cTarget, C.size_t(len(target)), cPlatform, C.size_t(len(HostPlatform)), fn,
		&msg[0], C.size_t(len(msg))) != 0 {
		return errors.Wrapf(ErrRegister, "xlaffi: registering %q with %q: %s", target, p.path, C.GoString(&msg[0]))
	}
	return nil
}

// Register registers each handler for HostPlatform. Registering the same Fn under the same
// Target again does nothing. Before registering, each handler is called the way XLA calls it at
// registration (a metadata query) and must answer ABIVersion. It returns the errors of the
// handlers that were not registered, joined (the others are): ErrInvalidHandler (bad target
// name, nil Fn, no metadata answer), ErrVersion (another ABI version), ErrDuplicate (the target
// taken by another function), ErrRegister.
func (p *Plugin) Register(handlers ...Handler) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, h := range handlers {
		if err := p.registerOne(h); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrors(errs)
}

// MustRegister is Register, but panics on error.
func (p *Plugin) MustRegister(handlers ...Handler) {
	must.M(p.Register(handlers...))
}

func (p *Plugin) registerOne(h Handler) error {
	if !reTarget.MatchString(h.Target) {
		return errors.Wrapf(ErrInvalidHandler, "xlaffi: target %q: accepted: letters, digits, '_' and '.', "+
			"not starting with a digit", h.Target)
	}
	if h.Fn == nil {
		return errors.Wrapf(ErrInvalidHandler, "xlaffi: target %q: nil Fn", h.Target)
	}
	if fn, found := p.handlers[h.Target]; found {
		if fn == h.Fn {
			return nil
		}
		return errors.Wrapf(ErrDuplicate, "xlaffi: target %q is already registered with another function", h.Target)
	}
	var major, minor C.int
	var msg [1024]C.char
	if C.xf_query_metadata(h.Fn, p.ffiAPI, &major, &minor, &msg[0], C.size_t(len(msg))) != 0 {
		return errors.Wrapf(ErrInvalidHandler, "xlaffi: target %q failed XLA's metadata query (%s): define it with "+
			"qffi.h's QFFI_HANDLER", h.Target, C.GoString(&msg[0]))
	}
	if v := (Version{int(major), int(minor)}); v != ABIVersion {
		if v == (Version{}) {
			return errors.Wrapf(ErrInvalidHandler, "xlaffi: target %q did not answer XLA's metadata query: define "+
				"it with qffi.h's QFFI_HANDLER", h.Target)
		}
		return errors.Wrapf(ErrVersion, "xlaffi: target %q answers XLA FFI API %s; accepted: %s", h.Target, v,
			ABIVersion)
	}
	if err := p.register(h.Target, h.Fn); err != nil {
		return err
	}
	p.handlers[h.Target] = h.Fn
	return nil
}

// Registered returns the targets registered through xlaffi with this plugin, sorted, ProbeTarget
// included.
func (p *Plugin) Registered() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.handlers))
}

// Path returns the path the plugin was opened by.
func (p *Plugin) Path() string { return p.path }

// PJRTVersion returns the PJRT C API version the plugin implements.
func (p *Plugin) PJRTVersion() Version { return p.pjrt }

// FFIVersion returns the XLA FFI API version the plugin runs.
func (p *Plugin) FFIVersion() Version { return p.ffi }

// String describes the plugin: "PJRT C API 0.115, XLA FFI API 0.4, platform Host".
func (p *Plugin) String() string {
	return fmt.Sprintf("PJRT C API %s, XLA FFI API %s, platform %s", p.pjrt, p.ffi, HostPlatform)
}
