package customcall

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// TestPinnedVersions fails when GoMLX or go-xla is upgraded under this package: its rewrite reads
// their unexported fields. Re-verify them as doc.go says, then update GoMLXVersion/GoXLAVersion.
// Test binaries carry no dependency versions, so it reads the module's go.mod (a binary built with
// go build has them, and Check compares them at run time).
func TestPinnedVersions(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatalf("reading the module's go.mod: %v", err)
	}
	required := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		for module := range map[string]bool{GoMLXModule: true, GoXLAModule: true} {
			switch {
			case len(fields) >= 2 && fields[0] == module:
				required[module] = fields[1]
			case strings.HasPrefix(strings.TrimSpace(line), "replace") && strings.Contains(line, module+" "):
				t.Errorf("go.mod replaces %s (%s): customcall was verified with the published module", module, line)
			}
		}
	}
	if len(required) == 0 {
		t.Fatal("go.mod requires neither GoMLX nor go-xla: wrong file?")
	}
	for module, want := range map[string]string{GoMLXModule: GoMLXVersion, GoXLAModule: GoXLAVersion} {
		if got := required[module]; got != want {
			t.Errorf("go.mod requires %s %q; customcall reaches into %s's internals: re-verify them (doc.go, "+
				"\"On an upgrade\") and update the pinned version", module, got, want)
		}
	}
	if got := moduleVersions(); len(got) > 0 {
		for module, want := range map[string]string{GoMLXModule: GoMLXVersion, GoXLAModule: GoXLAVersion} {
			if got[module] != want {
				t.Errorf("the binary is built with %s %q, want %q", module, got[module], want)
			}
		}
	}
}

// TestInternals checks that the fields and op types the rewrite uses are where it expects them.
func TestInternals(t *testing.T) {
	in, err := inspect(moduleVersions())
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	for _, f := range []reflect.StructField{in.outputOps, in.nodeValue, in.valueFn} {
		t.Logf("field %s %s at offset %d", f.Name, f.Type, f.Offset)
	}
	for want, v := range map[string]reflect.Value{customCallOpName: in.customCall, "stablehlo.constant": in.constant} {
		if got := v.Interface().(interface{ ToStableHLO() string }).ToStableHLO(); got != want {
			t.Errorf("op type %d is written %q, want %q", v.Int(), got, want)
		}
	}
}

// TestInspectRefuses checks that other module versions and other field layouts are errors.
func TestInspectRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions map[string]string
		want     string
	}{
		{"newer GoMLX", map[string]string{GoMLXModule: "v0.27.0", GoXLAModule: GoXLAVersion}, "v0.27.0"},
		{"newer go-xla", map[string]string{GoMLXModule: GoMLXVersion, GoXLAModule: "v0.2.0"}, "v0.2.0"},
		{"replaced GoMLX", map[string]string{GoMLXModule: " (replaced by ../gomlx)"}, "replaced by ../gomlx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := inspect(tc.versions); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("inspect(%v) = %v, want an error naming %q", tc.versions, err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		t     reflect.Type
		field string
		want  reflect.Type
	}{
		{"renamed field", reflect.TypeFor[graph.Node](), "outputOpsRenamed", reflect.TypeFor[int]()},
		{"retyped field", reflect.TypeFor[stablehlo.Value](), "fn", reflect.TypeFor[*stablehlo.Builder]()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := fieldOf(tc.t, tc.field, tc.want); err == nil {
				t.Errorf("fieldOf(%s, %q, %s) accepted", tc.t, tc.field, tc.want)
			}
		})
	}
	if _, err := opTypeNamed(reflect.TypeFor[stablehlo.Statement]().Field(2).Type, "stablehlo.no_such_op"); err == nil {
		t.Error("opTypeNamed found an op that does not exist")
	}
}

// TestDictionary checks the backend_config text of each attribute type.
func TestDictionary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs Attributes
		want  string // "" for an error
	}{
		{"empty", nil, "{}"},
		{"integers", Attributes{"b": int32(-3), "a": 7, "c": int64(1) << 40}, "{a = 7 : i64, b = -3 : i32, c = 1099511627776 : i64}"},
		{"floats", Attributes{"x": float32(2), "y": 0.1, "z": float32(1e-8)}, "{x = 2.0e+00 : f32, y = 1.0e-01 : f64, z = 1.0e-08 : f32}"},
		{"float32 shortest", Attributes{"x": float32(0.1)}, "{x = 1.0e-01 : f32}"},
		{"not finite", Attributes{"n": math.Inf(1), "m": float32(math.Inf(-1))}, "{m = 0xFF800000 : f32, n = 0x7FF0000000000000 : f64}"},
		{"bool", Attributes{"on": true, "off": false}, "{off = false, on = true}"},
		{"strings", Attributes{"s": `a"b\c` + "\n\u00e9"}, `{s = "a\"b\\c\0A\C3\A9"}`},
		{"array", Attributes{"v": []int64{1, -2, 3}, "e": []int64{}}, "{e = array<i64>, v = array<i64: 1, -2, 3>}"},
		{"bad name", Attributes{"a.b": 1}, ""},
		{"bad value", Attributes{"u": uint8(1)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.attrs.dictionary()
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("dictionary() = %q, want an error", got)
			case tc.want != "" && err != nil:
				t.Errorf("dictionary(): %v", err)
			case string(got) != tc.want:
				t.Errorf("dictionary() = %s\nwant           %s", got, tc.want)
			}
		})
	}
}
