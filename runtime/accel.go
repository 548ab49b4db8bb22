package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// AcceleratorPlugin is an accelerator's PJRT plugin installed by a Python wheel: JAX's CUDA plugin
// (jax-cuda13-pjrt, jax-cuda12-pjrt) or Google's libtpu.
type AcceleratorPlugin struct {
	// Name is GoMLX's name for the plugin: "cuda" or "tpu".
	Name string

	// Path is the absolute path of the plugin library, e.g.
	// ".../site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so" or ".../site-packages/libtpu/libtpu.so".
	Path string

	// SitePackages is the site-packages folder holding the wheel; empty when the plugin was found
	// through $PJRT_PLUGIN_LIBRARY_PATH outside of one.
	SitePackages string

	// Wheel is the wheel's distribution name and version read from its .dist-info folder
	// ("jax_cuda13_pjrt 0.7.2"); empty when unknown.
	Wheel string
}

// wheelPlugin says where a wheel installs a PJRT plugin inside site-packages.
type wheelPlugin struct {
	name, file, dist string
}

// wheelPlugins lists the wheels' plugins in the order they are preferred (tpu, then cuda; the
// newer CUDA first).
var wheelPlugins = []wheelPlugin{
	{"tpu", "libtpu/libtpu.so", "libtpu"},
	{"cuda", "jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_cuda13_pjrt"},
	{"cuda", "jax_plugins/xla_cuda12/xla_cuda_plugin.so", "jax_cuda12_pjrt"},
}

// sitePackagesPatterns are the site-packages folders searched after python3's sys.path and
// $VIRTUAL_ENV. "~" stands for the home folder; the others are relative to the filesystem root.
var sitePackagesPatterns = []string{
	"~/.local/lib/python3*/site-packages",
	"~/.pyenv/versions/*/lib/python3*/site-packages",
	"~/.virtualenvs/*/lib/python3*/site-packages",
	"~/.venv/lib/python3*/site-packages",
	"/usr/local/lib/python3*/site-packages",
	"/usr/local/lib/python3*/dist-packages",
	"/usr/lib/python3/dist-packages",
	"/usr/lib/python3*/site-packages",
	"/opt/conda/lib/python3*/site-packages",
}

// acceleratorDevices are the device files, relative to the filesystem root, whose presence says
// that the machine has the accelerator: NVIDIA's driver nodes, and the TPU VMs' /dev/accel*
// (v2-v5e) or /dev/vfio/* (v5p, v6e).
var acceleratorDevices = map[string][]string{
	"cuda": {"/dev/nvidiactl", "/dev/nvidia[0-9]*"},
	"tpu":  {"/dev/accel[0-9]*", "/dev/vfio/[0-9]*"},
}

// searchEnv is what the accelerator plugin search looks at; searchEnvFromOS fills it from the
// process environment, tests from a fake tree.
type searchEnv struct {
	root        string   // filesystem root for the absolute patterns: "/" (or a test's temporary folder)
	home        string   // home folder, for "~" patterns
	virtualEnv  string   // $VIRTUAL_ENV
	pluginPaths string   // $PJRT_PLUGIN_LIBRARY_PATH: folders or plugin files, ":"-separated
	pythonPaths []string // python3's sys.path
}

// searchEnvFromOS returns the search environment of this process. python3's sys.path is read
// (running python3 once, with a timeout) only when withPython is set.
func searchEnvFromOS(withPython bool) searchEnv {
	env := searchEnv{
		root:        "/",
		virtualEnv:  os.Getenv("VIRTUAL_ENV"),
		pluginPaths: os.Getenv(pjrt.PJRTPluginPathsEnv),
	}
	env.home, _ = os.UserHomeDir()
	if withPython {
		env.pythonPaths = pythonSysPath()
	}
	return env
}

// pythonSysPath returns python3's sys.path, or nil when python3 is not there or fails.
func pythonSysPath() []string {
	python, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", `import sys; print("\n".join(sys.path))`).Output()
	if err != nil {
		return nil
	}
	var paths []string
	for line := range strings.Lines(string(out)) { // one folder a line: a name may hold spaces
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			paths = append(paths, line)
		}
	}
	return paths
}

// underRoot places an absolute path of a pattern under env.root, and "~" under env.home.
func (env searchEnv) underRoot(pattern string) string {
	if rest, ok := strings.CutPrefix(pattern, "~/"); ok {
		if env.home == "" {
			return ""
		}
		return filepath.Join(env.home, rest)
	}
	return filepath.Join(env.root, pattern)
}

// sitePackages returns the existing site-packages folders, without repeats, in search order:
// python3's sys.path, $VIRTUAL_ENV, then sitePackagesPatterns.
func (env searchEnv) sitePackages() []string {
	var dirs []string
	add := func(dir string) {
		if dir == "" || !filepath.IsAbs(dir) {
			return
		}
		dir = filepath.Clean(dir)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || slices.Contains(dirs, dir) {
			return
		}
		dirs = append(dirs, dir)
	}
	addGlob := func(pattern string) {
		if pattern == "" {
			return
		}
		matches, _ := filepath.Glob(pattern)
		slices.Sort(matches)
		for _, m := range matches {
			add(m)
		}
	}
	for _, p := range env.pythonPaths {
		add(p)
	}
	if env.virtualEnv != "" {
		addGlob(filepath.Join(env.virtualEnv, "lib", "python3*", "site-packages"))
	}
	for _, pattern := range sitePackagesPatterns {
		addGlob(env.underRoot(pattern))
	}
	return dirs
}

// hasDevice reports whether the machine has the device files of the named accelerator.
func (env searchEnv) hasDevice(name string) bool {
	for _, pattern := range acceleratorDevices[name] {
		if matches, _ := filepath.Glob(env.underRoot(pattern)); len(matches) > 0 {
			return true
		}
	}
	return false
}

// findAcceleratorPlugins returns the first plugin found for each accelerator, in the order tpu,
// cuda: in $PJRT_PLUGIN_LIBRARY_PATH first (an entry is a folder holding xla_cuda_plugin.so or
// libtpu.so, or the path of one of those files), then in the site-packages folders.
func findAcceleratorPlugins(env searchEnv) []AcceleratorPlugin {
	found := make(map[string]AcceleratorPlugin)
	consider := func(path string) {
		fi, err := os.Stat(path)
		if err != nil || fi.IsDir() {
			return
		}
		var p AcceleratorPlugin
		for _, wp := range wheelPlugins {
			if filepath.Base(path) != filepath.Base(wp.file) {
				continue
			}
			if p.Name == "" {
				p = AcceleratorPlugin{Name: wp.name, Path: path}
			}
			// A plugin inside a wheel's layout gets its site-packages and wheel version.
			if site, ok := strings.CutSuffix(path, string(filepath.Separator)+filepath.FromSlash(wp.file)); ok {
				p.SitePackages = site
				p.Wheel = wheelVersion(site, wp.dist)
				break
			}
		}
		if _, done := found[p.Name]; p.Name != "" && !done {
			found[p.Name] = p
		}
	}
	for _, entry := range strings.Split(env.pluginPaths, ":") {
		if entry == "" || !filepath.IsAbs(entry) {
			continue
		}
		entry = filepath.Clean(entry)
		if fi, err := os.Stat(entry); err == nil && fi.IsDir() {
			for _, wp := range wheelPlugins {
				consider(filepath.Join(entry, filepath.Base(wp.file)))
			}
		} else {
			consider(entry)
		}
	}
	for _, site := range env.sitePackages() {
		for _, wp := range wheelPlugins {
			consider(filepath.Join(site, filepath.FromSlash(wp.file)))
		}
	}
	var plugins []AcceleratorPlugin
	for _, name := range preferredPlugins {
		if p, ok := found[name]; ok {
			plugins = append(plugins, p)
		}
	}
	return plugins
}

// wheelVersion returns "<dist> <version>" from the wheel's .dist-info folder in site, or "".
func wheelVersion(site, dist string) string {
	matches, _ := filepath.Glob(filepath.Join(site, dist+"-*.dist-info"))
	if len(matches) == 0 {
		return ""
	}
	slices.Sort(matches)
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(matches[len(matches)-1]), dist+"-"), ".dist-info")
	return dist + " " + version
}

// discovered caches the accelerator plugins found on this machine: only those whose device files
// are present (so CPU-only machines never load a GPU or TPU plugin), and all of them for explicit
// requests (GOMLX_BACKEND=xla:cuda).
var discovered = struct {
	once            sync.Once
	withDevice, all []AcceleratorPlugin
}{}

// DiscoverAccelerators returns the accelerator PJRT plugins installed by Python wheels on this
// machine, in the order tpu, cuda; it never loads them. Backend tries them (after the plugins
// go-xla finds itself, whose names take precedence) by their absolute paths.
//
// Each is the first found of: site-packages/libtpu/libtpu.so (wheel libtpu);
// site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so (jax-cuda13-pjrt), then xla_cuda12
// (jax-cuda12-pjrt). They are searched in $PJRT_PLUGIN_LIBRARY_PATH (folders holding those
// files, or the files), then in the site-packages folders of python3's sys.path, $VIRTUAL_ENV,
// ~/.local, ~/.pyenv/versions/*, ~/.virtualenvs/*, ~/.venv, /usr/local/lib/python3*,
// /usr/lib/python3* and /opt/conda.
//
// With present set, only the plugins whose devices the machine has (/dev/nvidiactl,
// /dev/nvidia<N>; /dev/accel<N>, /dev/vfio/<N>): a CPU-only machine never loads a GPU or TPU
// plugin, and python3 runs (for sys.path) only on a machine with such devices.
func DiscoverAccelerators(present bool) []AcceleratorPlugin {
	discovered.once.Do(func() {
		probe := searchEnvFromOS(false)
		anyDevice := probe.hasDevice("cuda") || probe.hasDevice("tpu")
		// python3's sys.path is worth its subprocess only on a machine with an accelerator.
		env := searchEnvFromOS(anyDevice)
		discovered.all = findAcceleratorPlugins(env)
		for _, p := range discovered.all {
			if env.hasDevice(p.Name) {
				discovered.withDevice = append(discovered.withDevice, p)
			}
		}
	})
	if present {
		return slices.Clone(discovered.withDevice)
	}
	return slices.Clone(discovered.all)
}

// nvidiaLibraries lists the NVIDIA libraries that JAX's CUDA plugin loads from the nvidia-* wheels
// before its PJRT plugin (jax_plugins/xla_cuda*/__init__.py, _load_nvidia_libraries): folder under
// site-packages/nvidia, then library file names in its lib/ folder.
var nvidiaLibraries = []struct {
	module string
	libs   []string
}{
	{"cuda_runtime", []string{"libcudart.so.12"}},
	{"cu13", []string{"libcudart.so.13"}},
	{"cuda_nvrtc", []string{"libnvrtc.so.12"}},
	{"cu13", []string{"libnvrtc.so.13"}},
	{"cublas", []string{"libcublas.so.12", "libcublasLt.so.12"}},
	{"cu13", []string{"libcublas.so.13", "libcublasLt.so.13"}},
	{"nccl", []string{"libnccl.so.2"}},
	{"cuda_cupti", []string{"libcupti.so.12"}},
	{"cu13", []string{"libcupti.so.13"}},
	{"cusparse", []string{"libcusparse.so.12"}},
	{"cu13", []string{"libcusparse.so.12"}},
	{"cusolver", []string{"libcusolver.so.11"}},
	{"cu13", []string{"libcusolver.so.12"}},
	{"cufft", []string{"libcufft.so.11"}},
	{"cu13", []string{"libcufft.so.12"}},
	{"nvshmem", []string{"libnvshmem_host.so.3"}},
	{"cudnn", []string{"libcudnn.so.9"}},
}

// nvidiaLibraryPaths returns the NVIDIA libraries of nvidiaLibraries present under site, in order.
func nvidiaLibraryPaths(site string) []string {
	var paths []string
	for _, group := range nvidiaLibraries {
		for _, lib := range group.libs {
			path := filepath.Join(site, "nvidia", group.module, "lib", lib)
			if _, err := os.Stat(path); err == nil && !slices.Contains(paths, path) {
				paths = append(paths, path)
			}
		}
	}
	return paths
}

// cudaDataDir returns the CUDA toolkit folder of the nvidia-* wheels under site, the one holding
// nvvm/libdevice (nvidia/cu13 for CUDA 13, nvidia/cuda_nvcc for CUDA 12), or "".
func cudaDataDir(site string) string {
	for _, dir := range []string{"cu13", "cuda_nvcc"} {
		path := filepath.Join(site, "nvidia", dir)
		if fi, err := os.Stat(filepath.Join(path, "nvvm", "libdevice")); err == nil && fi.IsDir() {
			return path
		}
	}
	return ""
}

const (
	xlaFlagsEnv        = "XLA_FLAGS"
	cudaDataDirFlag    = "--xla_gpu_cuda_data_dir"
	goXLACudaChecksEnv = "GOPJRT_CUDA_CHECKS"
)

// prepareCUDA readies the process for JAX's CUDA plugin p, as JAX's Python side does, before
// go-xla loads it by its absolute path:
//   - it sets the XLA flags of quanta's GPU formulations (gpuXLAFlags);
//   - it loads the NVIDIA libraries of the nvidia-* wheels (they are found by their soname from
//     then on);
//   - it points XLA at the wheels' CUDA toolkit (ptxas, libdevice) with
//     XLA_FLAGS=--xla_gpu_cuda_data_dir=..., unless XLA_FLAGS already sets it;
//   - it turns off go-xla's CUDA check (GOPJRT_CUDA_CHECKS=0, unless set), which looks for nvidia/
//     next to jax_plugins/ rather than where the wheels put it.
//
// It returns notes for Info.Notes.
func prepareCUDA(p AcceleratorPlugin) []string {
	var notes []string
	if flags, note := gpuXLAFlags(os.Getenv(xlaFlagsEnv), p.Path); note != "" {
		_ = os.Setenv(xlaFlagsEnv, flags)
		notes = append(notes, note)
	}
	if p.SitePackages == "" {
		return notes
	}
	libs := nvidiaLibraryPaths(p.SitePackages)
	loaded := 0
	for _, lib := range libs {
		if err := preloadLibrary(lib); err != nil {
			notes = append(notes, fmt.Sprintf("could not preload %s: %s", lib, oneLine(err.Error())))
			continue
		}
		loaded++
	}
	if len(libs) > 0 {
		notes = append(notes, fmt.Sprintf("preloaded %d of %d NVIDIA libraries from %s",
			loaded, len(libs), filepath.Join(p.SitePackages, "nvidia")))
	}
	if dir := cudaDataDir(p.SitePackages); dir != "" {
		if flags := os.Getenv(xlaFlagsEnv); !strings.Contains(flags, cudaDataDirFlag) {
			_ = os.Setenv(xlaFlagsEnv, strings.TrimSpace(flags+" "+cudaDataDirFlag+"="+dir))
			notes = append(notes, fmt.Sprintf("%s: %s=%s", xlaFlagsEnv, cudaDataDirFlag, dir))
		}
	}
	if _, set := os.LookupEnv(goXLACudaChecksEnv); !set {
		_ = os.Setenv(goXLACudaChecksEnv, "0")
	}
	return notes
}
