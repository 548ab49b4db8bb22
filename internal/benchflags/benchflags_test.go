package benchflags

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Shape
		ok   bool
	}{
		{"4096x11008", []Shape{{4096, 11008}}, true},
		{" 576x1536 ,1536x576", []Shape{{576, 1536}, {1536, 576}}, true},
		{"4096", nil, false},
		{"4096x0", nil, false},
		{"ax4", nil, false},
		{"", nil, false},
		{"576x576", []Shape{{576, 576}}, true},
		{"576x1536,576x1536", nil, false}, // measured twice otherwise
	} {
		got, err := ParseShapes(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParseShapes(%q) = %v, %v", tc.in, got, err)
		}
	}
	if got, err := ParseInts("1, 4,16"); err != nil || !slices.Equal(got, []int{1, 4, 16}) {
		t.Errorf("ParseInts = %v, %v", got, err)
	}
	if _, err := ParseInts("1,-4"); err == nil {
		t.Error("ParseInts accepted -4")
	}
	if _, err := ParseInts("1,4,1"); err == nil {
		t.Error("ParseInts accepted 1 twice")
	}
}
