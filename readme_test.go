package quanta_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMESnippetsCompile: every Go snippet of README.md stands, line for line (white space
// aside), in a test file of the repository, so each one compiles and runs as an Example.
func TestREADMESnippetsCompile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		sources = append(sources, normalize(string(b)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(snippets) == 0 {
		t.Fatal("README.md has no Go snippet")
	}
	for i, m := range snippets {
		snippet := normalize(m[1])
		found := false
		for _, src := range sources {
			if strings.Contains(src, snippet) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md Go snippet #%d is in no test file (copy it from an Example):\n%s", i+1, m[1])
		}
	}
}

// normalize collapses the white space within lines and drops empty lines, so indentation and the
// alignment of comments do not matter.
func normalize(s string) string {
	var lines []string
	for _, line := range strings.Split(s, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 {
			lines = append(lines, strings.Join(fields, " "))
		}
	}
	return strings.Join(lines, "\n")
}
