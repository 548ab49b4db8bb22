package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/lowering"
)

// TestGoXLAPJRTVersion: goXLAPJRTVersion is the version in go-xla's C header of the module this
// build uses.
func TestGoXLAPJRTVersion(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to locate go-xla's sources")
	}
	dir, err := exec.Command(goTool, "list", "-m", "-f", "{{.Dir}}", "github.com/gomlx/go-xla").Output()
	if err != nil || strings.TrimSpace(string(dir)) == "" {
		t.Skipf("go-xla's sources not found: %v", err)
	}
	header, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "pkg", "pjrt", "pjrt_c_api.h"))
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"PJRT_API_MAJOR", "PJRT_API_MINOR"} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindSubmatch(header)
		if m == nil {
			t.Fatalf("%s not in go-xla's header", name)
		}
		if v, _ := strconv.Atoi(string(m[1])); v != goXLAPJRTVersion[i] {
			t.Errorf("%s = %d in go-xla's header, goXLAPJRTVersion says %d", name, v, goXLAPJRTVersion[i])
		}
	}
}

func TestCheckPJRTVersion(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		want         string // in the note, or in the error when wantErr
		wantErr      bool
	}{
		{0, 83, "go-xla v0.1.4's own", false},
		{0, 115, "0.115, newer than go-xla v0.1.4's 0.83", false},
		{0, 60, "0.60, older than go-xla v0.1.4's 0.83", false},
		{1, 0, "cannot use another major version", true},
	} {
		note, err := checkPJRTVersion(tc.major, tc.minor)
		got := note
		if err != nil {
			got = err.Error()
		}
		if (err != nil) != tc.wantErr || !strings.Contains(got, tc.want) {
			t.Errorf("checkPJRTVersion(%d, %d) = %q, %v; want %q (error %v)", tc.major, tc.minor, note, err, tc.want, tc.wantErr)
		}
	}
}

// TestGPUXLAFlags: the subchannel dequantization flag is added only for a plugin that knows it,
// and never over the user's own setting.
func TestGPUXLAFlags(t *testing.T) {
	dir := t.TempDir()
	name := strings.TrimPrefix(lowering.SubchannelDequantizationFlag, "--")
	knows := filepath.Join(dir, "knows.so")
	// The name straddles the 4 MiB chunks fileContains reads.
	data := make([]byte, 4<<20+len(name))
	copy(data[4<<20-len(name)/2:], name)
	if err := os.WriteFile(knows, data, 0o644); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.so")
	if err := os.WriteFile(old, []byte("xla_gpu_enable_triton_gemm"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, flags, plugin string
		want, note          string
	}{
		{"known", "--xla_cpu_x=1", knows, "--xla_cpu_x=1 " + lowering.SubchannelDequantizationFlag + "=true", "XLA_FLAGS: "},
		{"unknown to the plugin", "", old, "", "the plugin does not know it"},
		{"set by the user", "--" + name + "=false", knows, "--" + name + "=false", ""},
		{"unreadable plugin", "", filepath.Join(dir, "missing.so"), "", "reading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags, note := gpuXLAFlags(tc.flags, tc.plugin)
			if flags != tc.want || !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
				t.Errorf("gpuXLAFlags(%q) = %q, %q; want %q and a note with %q", tc.flags, flags, note, tc.want, tc.note)
			}
		})
	}
}
