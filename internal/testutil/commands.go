package testutil

import (
	"encoding/json"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ArgumentRefused checks that check, a command's flag check, refuses a command line holding an
// argument ("int8 -json out.json") with an error naming it: flag parsing stops at the first
// argument, so the flags after it would otherwise be dropped silently.
func ArgumentRefused(t *testing.T, check func() error) {
	t.Helper()
	SetFlags(t, "int8", "-json", "out.json")
	if err := check(); err == nil || !strings.Contains(err.Error(), `argument "int8"`) {
		t.Errorf("the flag check with the arguments int8 -json out.json = %v; want an error naming \"int8\"", err)
	}
}

// CheckFlags sets the command line args (SetFlags) and checks that check, a command's flag check,
// accepts it (want "") or refuses it with an error containing want.
func CheckFlags(t testing.TB, check func() error, want string, args ...string) {
	t.Helper()
	SetFlags(t, args...)
	if err := check(); want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Errorf("the flag check of %q = %v; want %q", args, err, want)
	}
}

// SetFlags parses args as a command's command line (flag.CommandLine) for the rest of the test:
// into a fresh flag set holding the command's flags, so that flag.Visit sees only the flags args
// give, and the flags' values and flag.CommandLine are restored when the test ends.
func SetFlags(t testing.TB, args ...string) {
	t.Helper()
	saved := flag.CommandLine
	values := map[string]string{}
	fs := flag.NewFlagSet(saved.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	saved.VisitAll(func(f *flag.Flag) {
		values[f.Name] = f.Value.String()
		fs.Var(f.Value, f.Name, f.Usage)
	})
	flag.CommandLine = fs
	t.Cleanup(func() {
		flag.CommandLine = saved
		for name, value := range values {
			_ = saved.Lookup(name).Value.Set(value)
		}
	})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}

// FileInTemp returns a regular file in a fresh temporary folder: no output can be written below
// it (filepath.Join(file, "out")).
func FileInTemp(t testing.TB) string {
	t.Helper()
	return TempFile(t, "file", nil)
}

// TempFile writes data to a file named name in a fresh temporary folder and returns its path.
func TempFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// OutputsChecked checks that check, a command's run or its reading of the flags, refuses each
// output flag of outputs (the flag's name, as "-json", and its value) set to a path below a
// regular file with an error naming the flag and the file, the other outputs empty (none
// written); the outputs are restored after.
func OutputsChecked(t testing.TB, check func() error, outputs map[string]*string) {
	t.Helper()
	file := FileInTemp(t)
	saved := map[string]string{}
	for name, value := range outputs {
		saved[name] = *value
	}
	defer func() {
		for name, value := range outputs {
			*value = saved[name]
		}
	}()
	for _, name := range slices.Sorted(maps.Keys(outputs)) {
		for _, value := range outputs {
			*value = ""
		}
		*outputs[name] = filepath.Join(file, "out")
		if err := check(); err == nil || !strings.Contains(err.Error(), name+" "+file) {
			t.Errorf("%s under a file: %v; want an error naming %s", name, err, name)
		}
	}
}

// JSONEnvironment checks that the JSON file at path records what its figures ran on in
// "environment" as runtime.Environment writes it: the backend, the kernels and XLA_FLAGS.
func JSONEnvironment(t testing.TB, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Environment string `json:"environment"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"backend ", "kernels", "XLA_FLAGS="} {
		if !strings.Contains(got.Environment, want) {
			t.Errorf("%s: environment %q lacks %q", path, got.Environment, want)
		}
	}
}

// ReplacedWhole checks that write, a command's writing of its output files at paths, replaces each
// file whole (fileio.WriteAtomic: a complete new file renamed over it) rather than rewriting it in
// place, where an interrupted run leaves it truncated: a hard link taken to the old file before
// the write still reads the old content after it, and path reads something else.
func ReplacedWhole(t testing.TB, write func() error, paths ...string) {
	t.Helper()
	const old = "old content"
	for _, path := range paths {
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(path, path+".link"); err != nil {
			t.Skipf("no hard links here: %v", err)
		}
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		linked, err := os.ReadFile(path + ".link")
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(linked) != old || string(got) == old {
			t.Errorf("%s: rewritten in place (the old file now holds %d bytes, %q before); want a new file renamed over it",
				filepath.Base(path), len(linked), old)
		}
	}
}

// CaptureStderr returns what f writes on os.Stderr (the test fails if f returns an error).
func CaptureStderr(t testing.TB, f func() error) string {
	t.Helper()
	return capture(t, &os.Stderr, f)
}

// CaptureStdout returns what f writes on os.Stdout (the test fails if f returns an error).
func CaptureStdout(t testing.TB, f func() error) string {
	t.Helper()
	return capture(t, &os.Stdout, f)
}

// capture returns what f writes on *file, which it replaces by a pipe while f runs.
func capture(t testing.TB, file **os.File, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := *file
	*file = w
	done := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(r)
		done <- data
	}()
	err = f()
	*file = saved
	_ = w.Close()
	out := string(<-done)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
