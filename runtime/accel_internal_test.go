package runtime

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// touch creates the files (and their folders) under root; a name ending in "/" is a folder.
func touch(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, name := range names {
		path := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Fake site-packages folders, relative to the fake root.
const (
	systemSite = "usr/local/lib/python3.12/site-packages"
	userSite   = "home/u/.local/lib/python3.11/site-packages"
	pyenvSite  = "home/u/.pyenv/versions/3.12.4/lib/python3.12/site-packages"
	venvSite   = "work/venv/lib/python3.12/site-packages"
	distSite   = "usr/lib/python3/dist-packages"
	cuda13     = "jax_plugins/xla_cuda13/xla_cuda_plugin.so"
	cuda12     = "jax_plugins/xla_cuda12/xla_cuda_plugin.so"
	libtpu     = "libtpu/libtpu.so"
)

func TestFindAcceleratorPlugins(t *testing.T) {
	type want struct{ name, path, site, wheel string } // path and site relative to the root
	for _, tc := range []struct {
		name        string
		files       []string
		pluginPaths []string // relative to the root
		pythonPaths []string // relative to the root
		virtualEnv  string   // relative to the root
		want        []want
	}{
		{name: "nothing installed", files: []string{systemSite + "/numpy/__init__.py"}},
		{
			name:  "cuda13 wheel in the system site-packages",
			files: []string{systemSite + "/" + cuda13, systemSite + "/jax_cuda13_pjrt-0.7.2.dist-info/"},
			want:  []want{{"cuda", systemSite + "/" + cuda13, systemSite, "jax_cuda13_pjrt 0.7.2"}},
		},
		{
			name:  "cuda12 wheel in dist-packages, no dist-info",
			files: []string{distSite + "/" + cuda12},
			want:  []want{{"cuda", distSite + "/" + cuda12, distSite, ""}},
		},
		{
			name:  "cuda13 preferred to cuda12 in one site-packages",
			files: []string{userSite + "/" + cuda12, userSite + "/" + cuda13},
			want:  []want{{"cuda", userSite + "/" + cuda13, userSite, ""}},
		},
		{
			name: "tpu before cuda",
			files: []string{systemSite + "/" + cuda13, userSite + "/" + libtpu,
				userSite + "/libtpu-0.0.21.dist-info/"},
			want: []want{
				{"tpu", userSite + "/" + libtpu, userSite, "libtpu 0.0.21"},
				{"cuda", systemSite + "/" + cuda13, systemSite, ""},
			},
		},
		{
			name:  "user site-packages before the system's",
			files: []string{systemSite + "/" + cuda13, userSite + "/" + cuda12},
			want:  []want{{"cuda", userSite + "/" + cuda12, userSite, ""}},
		},
		{
			name:  "pyenv version",
			files: []string{pyenvSite + "/" + cuda13},
			want:  []want{{"cuda", pyenvSite + "/" + cuda13, pyenvSite, ""}},
		},
		{
			name:       "VIRTUAL_ENV before the user and system site-packages",
			files:      []string{userSite + "/" + cuda13, venvSite + "/" + cuda12},
			virtualEnv: "work/venv",
			want:       []want{{"cuda", venvSite + "/" + cuda12, venvSite, ""}},
		},
		{
			name:        "python3's sys.path first",
			files:       []string{userSite + "/" + cuda13, "opt/py/site-packages/" + cuda12},
			pythonPaths: []string{"opt/py/lib/python312.zip", "opt/py/site-packages"},
			want:        []want{{"cuda", "opt/py/site-packages/" + cuda12, "opt/py/site-packages", ""}},
		},
		{
			name:        "PJRT_PLUGIN_LIBRARY_PATH folder inside a wheel's layout",
			files:       []string{userSite + "/" + cuda13, "opt/w/site/" + cuda12, "opt/w/site/jax_cuda12_pjrt-0.6.0.dist-info/"},
			pluginPaths: []string{"nowhere", "opt/w/site/jax_plugins/xla_cuda12"},
			want:        []want{{"cuda", "opt/w/site/" + cuda12, "opt/w/site", "jax_cuda12_pjrt 0.6.0"}},
		},
		{
			name:        "PJRT_PLUGIN_LIBRARY_PATH file outside a wheel",
			files:       []string{userSite + "/" + libtpu, "opt/tpu/libtpu.so"},
			pluginPaths: []string{"opt/tpu/libtpu.so"},
			want:        []want{{"tpu", "opt/tpu/libtpu.so", "", ""}},
		},
		{
			name:  "other python versions and names are not plugins",
			files: []string{"usr/local/lib/python2.7/site-packages/" + cuda13, systemSite + "/jax_plugins/xla_cuda13/other.so"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			touch(t, root, tc.files...)
			env := searchEnv{root: root, home: filepath.Join(root, "home", "u")}
			for _, p := range tc.pluginPaths {
				env.pluginPaths += ":" + filepath.Join(root, p)
			}
			env.pluginPaths += ":relative/ignored"
			for _, p := range tc.pythonPaths {
				env.pythonPaths = append(env.pythonPaths, filepath.Join(root, p))
			}
			if tc.virtualEnv != "" {
				env.virtualEnv = filepath.Join(root, tc.virtualEnv)
			}
			got := findAcceleratorPlugins(env)
			var gotRel []want
			for _, p := range got {
				rel := func(path string) string {
					if path == "" {
						return ""
					}
					r, err := filepath.Rel(root, path)
					if err != nil {
						t.Fatal(err)
					}
					return filepath.ToSlash(r)
				}
				gotRel = append(gotRel, want{p.Name, rel(p.Path), rel(p.SitePackages), p.Wheel})
			}
			if !slices.Equal(gotRel, tc.want) {
				t.Errorf("findAcceleratorPlugins:\n got %+v\nwant %+v", gotRel, tc.want)
			}
		})
	}
}

func TestHasDevice(t *testing.T) {
	for _, tc := range []struct {
		files             []string
		wantCUDA, wantTPU bool
	}{
		{nil, false, false},
		{[]string{"dev/null", "dev/nvidia-uvm"}, false, false},
		{[]string{"dev/nvidiactl"}, true, false},
		{[]string{"dev/nvidia0", "dev/nvidia1"}, true, false},
		{[]string{"dev/accel0"}, false, true},
		{[]string{"dev/vfio/0", "dev/vfio/vfio"}, false, true},
		{[]string{"dev/vfio/vfio"}, false, false},
	} {
		t.Run(strings.Join(tc.files, ","), func(t *testing.T) {
			root := t.TempDir()
			touch(t, root, append([]string{"dev/"}, tc.files...)...)
			env := searchEnv{root: root}
			if got := env.hasDevice("cuda"); got != tc.wantCUDA {
				t.Errorf("hasDevice(cuda) = %v, want %v", got, tc.wantCUDA)
			}
			if got := env.hasDevice("tpu"); got != tc.wantTPU {
				t.Errorf("hasDevice(tpu) = %v, want %v", got, tc.wantTPU)
			}
		})
	}
}

func TestNvidiaWheels(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    []string
		wantLibs []string // relative to site-packages/nvidia
		wantData string   // relative to site-packages/nvidia
	}{
		{name: "none"},
		{
			name: "CUDA 13 layout",
			files: []string{"cu13/lib/libcudart.so.13", "cu13/lib/libcublas.so.13", "cu13/lib/libcublasLt.so.13",
				"cu13/nvvm/libdevice/", "cudnn/lib/libcudnn.so.9", "nccl/lib/libnccl.so.2", "cu13/lib/libunrelated.so",
				"cu13/lib/libcusparse.so.12"},
			wantLibs: []string{"cu13/lib/libcudart.so.13", "cu13/lib/libcublas.so.13", "cu13/lib/libcublasLt.so.13",
				"nccl/lib/libnccl.so.2", "cu13/lib/libcusparse.so.12", "cudnn/lib/libcudnn.so.9"},
			wantData: "cu13",
		},
		{
			name:     "CUDA 12 layout",
			files:    []string{"cuda_runtime/lib/libcudart.so.12", "cuda_nvcc/nvvm/libdevice/", "cublas/lib/libcublas.so.12"},
			wantLibs: []string{"cuda_runtime/lib/libcudart.so.12", "cublas/lib/libcublas.so.12"},
			wantData: "cuda_nvcc",
		},
		{
			name:  "toolkit without libdevice",
			files: []string{"cuda_nvcc/bin/ptxas"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := t.TempDir()
			for _, f := range tc.files {
				touch(t, site, "nvidia/"+f)
			}
			var gotLibs []string
			for _, p := range nvidiaLibraryPaths(site) {
				r, _ := filepath.Rel(filepath.Join(site, "nvidia"), p)
				gotLibs = append(gotLibs, filepath.ToSlash(r))
			}
			if !slices.Equal(gotLibs, tc.wantLibs) {
				t.Errorf("nvidiaLibraryPaths = %q, want %q", gotLibs, tc.wantLibs)
			}
			wantData := ""
			if tc.wantData != "" {
				wantData = filepath.Join(site, "nvidia", tc.wantData)
			}
			if got := cudaDataDir(site); got != wantData {
				t.Errorf("cudaDataDir = %q, want %q", got, wantData)
			}
		})
	}
}

func TestParseNvidiaSMIMemory(t *testing.T) {
	got := parseNvidiaSMIMemory("0, NVIDIA H100 80GB HBM3, 81559 MiB\n1, Tesla T4, 15360 MiB\n\n")
	want := []string{"#0 NVIDIA H100 80GB HBM3: 81559 MiB (nvidia-smi)", "#1 Tesla T4: 15360 MiB (nvidia-smi)"}
	if !slices.Equal(got, want) {
		t.Errorf("parseNvidiaSMIMemory = %q, want %q", got, want)
	}
}

// TestDeviceMemoryWhy: when nvidia-smi fails or lists no GPU, the memory line says what it said,
// not only its exit status ("unknown (nvidia-smi: exit status 9)").
func TestDeviceMemoryWhy(t *testing.T) {
	for _, tc := range []struct{ name, script, want string }{
		{"driver", "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
			"unknown (nvidia-smi: exit status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.)"},
		{"stderr", "echo 'Failed to initialize NVML: Driver/library version mismatch' >&2; exit 18",
			"unknown (nvidia-smi: exit status 18: Failed to initialize NVML: Driver/library version mismatch)"},
		{"no GPU", "echo", `unknown (nvidia-smi: no GPU listed: "")`},
		{"GPU", "echo '0, Tesla T4, 15360 MiB'", "#0 Tesla T4: 15360 MiB (nvidia-smi)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir)
			if got := deviceMemory("cuda"); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("deviceMemory = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPluginVersion(t *testing.T) {
	attrs := pjrt.NamedValuesMap{"stablehlo_current_version": []int64{1, 20, 0}, "xla_version": int64(2)}
	for _, tc := range []struct {
		name  string
		accel *AcceleratorPlugin
		want  string
	}{
		{"go-xla plugin", nil, "StableHLO 1.20.0; xla_version 2"},
		{"wheel", &AcceleratorPlugin{Wheel: "jax_cuda13_pjrt 0.7.2"}, "jax_cuda13_pjrt 0.7.2; StableHLO 1.20.0; xla_version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pluginVersion(attrs, tc.accel); got != tc.want {
				t.Errorf("pluginVersion = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInfoStringAccelerator(t *testing.T) {
	info := &Info{
		Config: "xla:/s/jax_plugins/xla_cuda13/xla_cuda_plugin.so", Source: SourceAuto,
		PluginName: "cuda", PluginPath: "/s/jax_plugins/xla_cuda13/xla_cuda_plugin.so", PJRTVersion: "0.80",
		PluginVersion: "jax_cuda13_pjrt 0.7.2", Devices: []string{"cuda:0"},
		Memory: []string{"#0 NVIDIA H100 80GB HBM3: 81559 MiB (nvidia-smi)"},
	}
	s := info.String()
	for _, want := range []string{"version:      jax_cuda13_pjrt 0.7.2\n", "accelerator:  cuda\n",
		"memory:       #0 NVIDIA H100 80GB HBM3: 81559 MiB (nvidia-smi)\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("Info.String() lacks %q:\n%s", want, s)
		}
	}
}

// TestPythonSysPathSpaces: python3's sys.path is read one folder a line, so that a folder whose
// name holds a space (a virtualenv under "/opt/my envs") is searched (it was split into pieces at
// the space, and its wheels' plugins were not found).
func TestPythonSysPathSpaces(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\nprintf '%s\\n' '' '/usr/lib/python3.12' '/opt/my envs/venv/lib/python3.12/site-packages'\n"
	if err := os.WriteFile(filepath.Join(dir, "python3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got := pythonSysPath()
	want := []string{"/usr/lib/python3.12", "/opt/my envs/venv/lib/python3.12/site-packages"}
	if !slices.Equal(got, want) {
		t.Errorf("pythonSysPath() = %q, want %q", got, want)
	}
}
