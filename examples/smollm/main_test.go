package main

import (
	"flag"
	"strings"
	"testing"
)

// TestCheckFlags: -max, -maxlen and -minwindow out of range are errors naming the flag, not the
// generator's fields (-max 0 would be MaxNewTokens 0, no bound, generating up to -maxlen tokens).
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"max", "0", "-max 0; accepted: >= 1"},
		{"max", "-1", "-max -1; accepted: >= 1"},
		{"maxlen", "1", "-maxlen 1; accepted: >= 2"},
		{"minwindow", "-1", "-minwindow -1; accepted: >= 1"},
		{"max", "1", ""},
		{"minwindow", "0", ""},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			old := flag.Lookup(tc.flag).Value.String()
			defer func() { _ = flag.Set(tc.flag, old) }()
			if err := flag.Set(tc.flag, tc.value); err != nil {
				t.Fatal(err)
			}
			err := checkFlags()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("checkFlags() = %v; want %q", err, tc.want)
			}
		})
	}
}
