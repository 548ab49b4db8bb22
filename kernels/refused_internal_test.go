package kernels

import (
	"strings"
	"testing"

	"github.com/pkg/errors"
)

// TestRefusedKernelsNotSilent: a plugin that refuses every kernel handler makes the kernels
// unavailable (a report that only counted the registered probe target called them available, and
// `go run ./bench` measured without them); one that refuses some says how many in the one-line
// summary the benchmark headers carry.
func TestRefusedKernelsNotSilent(t *testing.T) {
	refused := errors.New("refused")
	for _, tc := range []struct {
		name     string
		failed   map[string]error
		handlers int
		wantErr  string // "" for none
	}{
		{"none refused", map[string]error{}, 3, ""},
		{"some refused", map[string]error{"quanta_b": refused}, 3, ""},
		{"all refused", map[string]error{"quanta_b": refused, "quanta_a": refused, "quanta_c": refused}, 3,
			"the plugin refused every kernel (3; quanta_a: refused)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := noneRegistered(tc.failed, tc.handlers)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("noneRegistered = %v; want %q", err, tc.wantErr)
			}
			r := &Report{Registered: []string{"quanta_probe"}, Failed: tc.failed, Unavailable: err, Plugin: "p", ISA: "avx2", Threads: 2}
			summary := r.Summary()
			switch {
			case err != nil:
				if r.Err() == nil || !strings.HasPrefix(summary, "kernels: NONE: ") {
					t.Errorf("Err() = %v, Summary() = %q; want the kernels unavailable", r.Err(), summary)
				}
			case len(tc.failed) > 0:
				if want := "kernels: 1 registered (p), 1 refused (quanta doctor lists them), avx2, 2 threads"; summary != want {
					t.Errorf("Summary() = %q; want %q", summary, want)
				}
			default:
				if want := "kernels: 1 registered (p), avx2, 2 threads"; summary != want {
					t.Errorf("Summary() = %q; want %q", summary, want)
				}
			}
		})
	}
}
