package main

import (
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestMarkdownReplacedWhole: -markdown is replaced whole (a complete new file renamed over the old
// one), not rewritten in place, where an interrupted run left a truncated file.
func TestMarkdownReplacedWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peer.md")
	testutil.ReplacedWhole(t, func() error { return writeMarkdown(path, "| quanta variant | eformer |\n") }, path)
}

// TestCheckFlags: a count below 1, a value listed twice, a quanta variant bench refuses or that no
// eformer format matches, and a flag -reuse does not read are errors naming the flag before the
// harnesses run (eformer's ran first, for minutes: -layers -1 was measured as one layer, -formats
// nf4,nf4 twice, and -variants nf4,nf4 was refused by bench only after it).
func TestCheckFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-k", "0"}, "-k 0; accepted: >= 1"},
		{[]string{"-layers", "-1"}, "-layers -1; accepted: >= 1"},
		{[]string{"-layers-large", "0"}, "-layers-large 0; accepted: >= 1"},
		{[]string{"-m", "1,8,1"}, "-m: bad list"},
		{[]string{"-formats", "nf4,int8,nf4"}, `-formats: "nf4" listed twice`},
		{[]string{"-formats", "nf4,,int8"}, "an empty name"},
		{[]string{"-variants", "nf4,int8,nf4"}, `-variants: "nf4" listed twice`},
		{[]string{"-variants", "nf4,bogus"}, `-variants: unknown format "bogus"`},
		{[]string{"-variants", "dense,nf4"}, `-variants: "dense"`},
		{[]string{"-formats", "int8,dense", "-variants", "nf4"}, `-variants: "nf4" has no eformer format`},
		{[]string{"-reuse", "-m", "1", "-variants", "nf4"}, "-reuse with -m, -variants"},
		{[]string{"-reuse", "-k", "2048"}, ""},
		{[]string{"-m", "1,8", "-formats", "nf4,dense", "-variants", "nf4,nf4@materialize"}, ""},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			setFlags(t, c.args...)
			if err := checkFlags(); c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("checkFlags() = %v; want %q", err, c.want)
			}
		})
	}
	t.Run("argument", func(t *testing.T) { testutil.ArgumentRefused(t, checkFlags) })
}

// setFlags parses args as the command line, for the test's duration, into a fresh flag set over
// the command's flag values (flag.Visit then sees only the flags args set): at cleanup the command
// line and every flag's value are restored.
func setFlags(t *testing.T, args ...string) {
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
