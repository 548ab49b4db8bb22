package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/janpfeifer/must"
	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/internal/kernelreg"
	"github.com/quanta-ml/quanta/kernels"
)

const (
	// CPUDevicesEnv names the environment variable that asks for N virtual XLA CPU devices.
	CPUDevicesEnv = "QUANTA_CPU_DEVICES"

	// InstallCommand is the command that installs the XLA CPU PJRT plugin, run in the
	// quanta repository. It is printed when the pure-Go fallback is used.
	InstallCommand = "make setup"

	// cpuDeviceCountOption is the PJRT CPU client option that sets its number of devices.
	cpuDeviceCountOption = "cpu_device_count"
)

// Sources of the backend choice, reported in Info.Source.
const (
	SourceEnv      = "GOMLX_BACKEND"
	SourceAuto     = "auto"
	SourceFallback = "fallback"
)

// preferredPlugins is the order in which XLA PJRT plugins are tried when GOMLX_BACKEND is not set.
var preferredPlugins = []string{"tpu", "cuda", "cpu"}

// rePluginPath extracts a plugin name from its file name, as go-xla does.
var rePluginPath = regexp.MustCompile(`^(?:pjrt_c_api_(.+)_plugin|pjrt[-_]plugin[-_](.+))\.(?:so|dylib|dll)$`)

// shared holds the process-wide backend, started once.
var shared struct {
	once    sync.Once
	backend backends.Backend
	info    *Info
	err     error
}

func startShared() {
	shared.once.Do(func() {
		shared.backend, shared.info, shared.err = start()
		if shared.err == nil {
			// Right after the plugin loaded: quanta's kernels, for the products built on it.
			_, _ = kernels.Attach(shared.backend)
		}
	})
}

// Backend returns the process-wide backend, starting it on the first call (see the package
// documentation for how it is chosen). It is safe for concurrent use; every caller gets the
// same backend, or the same error. Do not Finalize it.
func Backend() (backends.Backend, error) {
	startShared()
	return shared.backend, shared.err
}

// MustBackend is Backend, but panics on error.
func MustBackend() backends.Backend {
	return must.M1(Backend())
}

// Report describes the process-wide backend, starting it if needed.
// The returned Info is a copy: changing it changes nothing.
func Report() (*Info, error) {
	startShared()
	if shared.err != nil {
		return nil, shared.err
	}
	return shared.info.clone(), nil
}

// MustReport is Report, but panics on error.
func MustReport() *Info {
	return must.M1(Report())
}

// IsXLA reports whether backend is GoMLX's XLA (PJRT) backend.
func IsXLA(backend backends.Backend) bool {
	_, ok := backend.(*xla.Backend)
	return ok
}

// IsGo reports whether backend is GoMLX's pure-Go backend ("go", package simplego).
func IsGo(backend backends.Backend) bool {
	_, ok := backend.(*simplego.Backend)
	return ok
}

// start chooses and starts the backend: GOMLX_BACKEND, else the best XLA plugin, else the
// pure-Go fallback.
func start() (backends.Backend, *Info, error) {
	// GoMLX's auto-installer fetches plugins from GitHub: never let it run. The environment
	// variable also reaches child processes.
	if _, found := os.LookupEnv(xla.NoAutoInstallEnv); !found {
		_ = os.Setenv(xla.NoAutoInstallEnv, "1")
	}
	xla.EnableAutoInstall(false)
	if err := configureXLAFlags(); err != nil {
		return nil, nil, err
	}
	// QUANTA_CPU_DEVICES applies to the XLA CPU plugin only: an invalid value is an error where
	// that plugin may start (or, for a plugin path, where the plugin started has CPU devices), and
	// ignored with a note elsewhere, as a valid one is.
	cpuDevices, cpuErr := parseCPUDevices(os.Getenv(CPUDevicesEnv))
	config := os.Getenv(backends.ConfigEnvVar)
	if cpuErr != nil && mayStartXLACPU(config) {
		return nil, nil, cpuErr
	}
	info := &Info{CPUDevices: cpuDevices}
	if cpuErr != nil {
		info.Notes = append(info.Notes, fmt.Sprintf("%s=%q ignored: it applies to the XLA CPU plugin only",
			CPUDevicesEnv, os.Getenv(CPUDevicesEnv)))
	}
	var err error
	var backend backends.Backend
	if config != "" {
		info.Source = SourceEnv
		backend, err = startConfig(config, cpuDevices, info)
		if err != nil {
			return nil, nil, errors.WithMessagef(err, "quanta runtime: failed to start the backend %s=%q",
				backends.ConfigEnvVar, config)
		}
	} else {
		info.Source = SourceAuto
		backend, err = startAuto(cpuDevices, info)
		if err != nil {
			return nil, nil, err
		}
	}
	// A plugin given by a path whose file name does not say "cpu" is known by its devices: on CPUs
	// it is the XLA CPU plugin, where an invalid value is an error as everywhere else.
	if _, cpu := kernelreg.XLACPU(backend); cpuErr != nil && cpu {
		backend.Finalize()
		return nil, nil, cpuErr
	}
	info.Name = backend.Name()
	info.Description = backend.Description()
	for i := range backend.NumDevices() {
		info.Devices = append(info.Devices, backend.DeviceDescription(backends.DeviceNum(i)))
	}
	if cpuDevices > 0 && !(IsXLA(backend) && isCPUPlugin(info.PluginName)) {
		info.Notes = append(info.Notes, fmt.Sprintf("%s=%d ignored: it applies to the XLA CPU plugin only",
			CPUDevicesEnv, cpuDevices))
	}
	return backend, info, nil
}

// mayStartXLACPU reports whether the XLA CPU plugin may start for the GOMLX_BACKEND configuration
// config: unset (the best plugin found may be the CPU one), or XLA with the CPU plugin or none
// named.
func mayStartXLACPU(config string) bool {
	if config == "" {
		return true
	}
	name, backendConfig, _ := strings.Cut(config, ":")
	plugin, _, _ := strings.Cut(backendConfig, ",")
	return isXLAName(name) && (plugin == "" || isCPUPlugin(pluginNameOf(plugin)))
}

// startConfig starts the backend named by a GOMLX_BACKEND configuration.
func startConfig(config string, cpuDevices int, info *Info) (backends.Backend, error) {
	name, backendConfig := config, ""
	if idx := strings.Index(config, ":"); idx != -1 {
		name, backendConfig = config[:idx], config[idx+1:]
	}
	if isXLAName(name) {
		return startXLA(backendConfig, cpuDevices, info)
	}
	info.Config = config
	return newWithConfig(config)
}

// newWithConfig calls backends.NewWithConfig, turning its panics (unknown backend) into errors.
func newWithConfig(config string) (backend backends.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.Errorf("%v", r)
		}
	}()
	return backends.NewWithConfig(config)
}

// candidate is a PJRT plugin to try: config is what xla.NewWithOptions takes (a name go-xla finds,
// or the absolute path of a wheel's plugin); accel is set for the latter.
type candidate struct {
	name, config string
	accel        *AcceleratorPlugin
}

// candidates returns the plugins to try, best first (tpu, cuda, cpu, then others by name): those
// go-xla finds, plus the accelerator plugins of Python wheels (DiscoverAccelerators) whose names
// go-xla does not find; with present, only wheel plugins whose devices the machine has.
func candidates(present bool) []candidate {
	names := xla.GetAvailablePlugins()
	var list []candidate
	for _, name := range names {
		list = append(list, candidate{name: name, config: name})
	}
	for _, p := range DiscoverAccelerators(present) {
		if !slices.Contains(names, p.Name) {
			list = append(list, candidate{name: p.Name, config: p.Path, accel: &p})
		}
	}
	order := orderPlugins(candidateNames(list))
	slices.SortStableFunc(list, func(a, b candidate) int {
		return slices.Index(order, a.name) - slices.Index(order, b.name)
	})
	return list
}

// candidateNames returns the candidates' names.
func candidateNames(list []candidate) []string {
	names := make([]string, len(list))
	for i, c := range list {
		names[i] = c.name
	}
	return names
}

// startAuto tries the XLA plugins found in preference order and falls back to the pure-Go
// backend, printing one line to stderr, when none starts.
func startAuto(cpuDevices int, info *Info) (backends.Backend, error) {
	var failures []string
	for _, c := range candidates(true) {
		backend, err := startCandidate(c, "", cpuDevices, info)
		if err == nil {
			return backend, nil
		}
		failures = append(failures, fmt.Sprintf("xla:%s: %s", c.config, oneLine(err.Error())))
	}
	info.Notes = append(info.Notes, failures...)
	info.Source = SourceFallback
	info.Fallback = true
	info.Config = simplego.BackendName
	info.PluginName, info.PluginPath, info.PJRTVersion, info.PluginVersion = "", "", "", ""
	fmt.Fprintln(os.Stderr, fallbackMessage(failures))
	backend, err := simplego.New("")
	if err != nil {
		return nil, errors.WithMessage(err, "quanta runtime: failed to start the pure-Go fallback backend")
	}
	return backend, nil
}

// fallbackMessage is the one line printed to stderr when the pure-Go fallback is used.
func fallbackMessage(failures []string) string {
	if len(failures) == 0 {
		return fmt.Sprintf("quanta: XLA PJRT plugin not found (no pjrt_c_api_<name>_plugin.so in %s); "+
			"using GoMLX's pure-Go backend %q instead (slow); install the XLA CPU plugin with: %s",
			searchPathsDescription(), simplego.BackendName, InstallCommand)
	}
	return fmt.Sprintf("quanta: no XLA PJRT plugin could start (%s); "+
		"using GoMLX's pure-Go backend %q instead (slow); reinstall the XLA CPU plugin with: %s",
		strings.Join(failures, "; "), simplego.BackendName, InstallCommand)
}

// searchPathsDescription says where go-xla looks for plugins.
func searchPathsDescription() string {
	if paths, found := os.LookupEnv(pjrt.PJRTPluginPathsEnv); found {
		return fmt.Sprintf("$%s=%q", pjrt.PJRTPluginPathsEnv, paths)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "$HOME"
	}
	return fmt.Sprintf("%s, /usr/local/lib/go-xla or the system library paths",
		filepath.Join(home, ".local", "lib", "go-xla"))
}

// startXLA starts the XLA backend on the given plugin configuration: "<plugin>[,option...]",
// where <plugin> is a name ("cpu") or an absolute path; an empty plugin picks the best found.
// The names "cuda" and "tpu", when go-xla does not find them, start the plugin of a Python wheel
// (DiscoverAccelerators), even on a machine without the device files.
func startXLA(pluginConfig string, cpuDevices int, info *Info) (backends.Backend, error) {
	plugin, options, _ := strings.Cut(pluginConfig, ",")
	var list []candidate
	if plugin == "" {
		list = candidates(true)
	} else if !filepath.IsAbs(plugin) {
		list = slices.DeleteFunc(candidates(false), func(c candidate) bool { return c.name != plugin })
	}
	switch {
	case len(list) > 0:
		return startCandidate(list[0], options, cpuDevices, info)
	case plugin == "":
		return nil, errors.Errorf("no XLA PJRT plugin found in %s; install the XLA CPU plugin with: %s",
			searchPathsDescription(), InstallCommand)
	}
	return startCandidate(candidate{name: pluginNameOf(plugin), config: plugin}, options, cpuDevices, info)
}

// startCandidate starts the XLA backend on plugin c with the plugin options (comma-separated, may
// be empty), readying the process first for a wheel's CUDA plugin.
func startCandidate(c candidate, options string, cpuDevices int, info *Info) (backends.Backend, error) {
	pluginConfig := c.config
	if options != "" {
		pluginConfig += "," + options
	}
	var notes []string
	if c.accel != nil {
		notes = append(notes, fmt.Sprintf("%s plugin from %s", c.name, describeWheel(*c.accel)))
		if c.name == "cuda" {
			notes = append(notes, prepareCUDA(*c.accel)...)
		}
	}
	// Loading the plugin alone gives its PJRT C API version before a client exists.
	if plugin, err := pjrt.GetPlugin(c.config); err == nil {
		note, err := checkPJRTVersion(plugin.Version())
		if err != nil {
			return nil, errors.WithMessagef(err, "PJRT plugin %s", plugin.Path())
		}
		if c.accel != nil {
			notes = append(notes, note)
		}
	}
	var clientOptions pjrt.NamedValuesMap
	if cpuDevices > 0 && isCPUPlugin(c.name) {
		clientOptions = pjrt.NamedValuesMap{cpuDeviceCountOption: int64(cpuDevices)}
	}
	backend, err := xla.NewWithOptions(pluginConfig, clientOptions)
	if err != nil {
		if isCPUPlugin(c.name) && !filepath.IsAbs(c.config) {
			return nil, errors.Errorf("%v; install the XLA CPU plugin with: %s", err, InstallCommand)
		}
		return nil, err
	}
	// A plugin file whose name does not say what it is (a wheel's xla_cpu_pjrt.so): its devices do.
	// On CPUs it is XLA's CPU plugin, named so, and starts again with the virtual devices asked for.
	if _, cpu := kernelreg.XLACPU(backend); !IsAccelerator(c.name) && cpu {
		if cpuDevices > 0 && clientOptions == nil {
			backend.Finalize()
			backend, err = xla.NewWithOptions(pluginConfig, pjrt.NamedValuesMap{cpuDeviceCountOption: int64(cpuDevices)})
			if err != nil {
				return nil, errors.WithMessagef(err, "restarting the CPU plugin %s with %s=%d", c.config, CPUDevicesEnv, cpuDevices)
			}
		}
		c.name = "cpu"
	}
	info.Config = xla.BackendName + ":" + pluginConfig
	info.PluginName = c.name
	info.Notes = append(info.Notes, notes...)
	if p, err := pjrt.GetPlugin(c.config); err == nil {
		major, minor := p.Version()
		info.PluginPath = p.Path()
		info.PJRTVersion = fmt.Sprintf("%d.%d", major, minor)
		info.PluginVersion = pluginVersion(p.Attributes(), c.accel)
	}
	info.Memory = deviceMemory(c.name)
	info.XLAFlags = os.Getenv(xlaFlagsEnv)
	return backend, nil
}

// describeWheel says where a wheel's plugin comes from: "jax_cuda13_pjrt 0.7.2 (/path)".
func describeWheel(p AcceleratorPlugin) string {
	if p.Wheel == "" {
		return p.Path
	}
	return fmt.Sprintf("%s (%s)", p.Wheel, p.Path)
}

// isXLAName reports whether name is one of the names GoMLX registers its XLA backend under.
func isXLAName(name string) bool {
	return slices.Contains([]string{xla.BackendName, "stablehlo", "hlo", "shlo"}, name)
}

// pluginNameOf returns the platform name of a plugin given by name or by file path
// ("/x/pjrt_c_api_cpu_plugin.so" -> "cpu").
func pluginNameOf(plugin string) string {
	if !strings.ContainsAny(plugin, `/\`) {
		return plugin
	}
	m := rePluginPath.FindStringSubmatch(filepath.Base(plugin))
	switch {
	case m == nil:
		return filepath.Base(plugin)
	case m[1] != "":
		return m[1]
	default:
		return m[2]
	}
}

// isCPUPlugin reports whether the plugin (name or path) is XLA's CPU plugin.
func isCPUPlugin(plugin string) bool {
	return pluginNameOf(plugin) == "cpu"
}

// orderPlugins sorts plugin names by preference (tpu, cuda, cpu), the others after, by name.
func orderPlugins(plugins []string) []string {
	rank := func(name string) int {
		if i := slices.Index(preferredPlugins, name); i != -1 {
			return i
		}
		return len(preferredPlugins)
	}
	ordered := slices.Clone(plugins)
	slices.SortStableFunc(ordered, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return ordered
}

// MaxCPUDevices bounds QUANTA_CPU_DEVICES: XLA CPU takes seconds to start thousands of virtual
// devices and aborts beyond some tens of thousands.
const MaxCPUDevices = 256

// parseCPUDevices parses QUANTA_CPU_DEVICES: empty means unset (0), else an integer in
// [1, MaxCPUDevices].
func parseCPUDevices(value string) (int, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > MaxCPUDevices {
		return 0, errors.Errorf("quanta runtime: invalid %s=%q: want a number of virtual CPU devices from 1 to %d, e.g. %s=4",
			CPUDevicesEnv, value, MaxCPUDevices, CPUDevicesEnv)
	}
	return n, nil
}

// oneLine joins the lines of a multi-line message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
