package main

import (
	"math"
	"strings"
	"testing"
)

// TestPeakGBps: a -peak-gbps that is not a finite bandwidth (or 0, unknown) is an error naming the
// flag, before anything is measured (an infinite limit made every fraction 0 and the JSON empty).
func TestPeakGBps(t *testing.T) {
	for _, tc := range []struct {
		value float64
		ok    bool
	}{
		{0, true}, {4800, true}, {math.Inf(1), false}, {math.NaN(), false}, {-5, false},
	} {
		old := *flagPeakGBps
		*flagPeakGBps = tc.value
		_, err := parseConfig()
		*flagPeakGBps = old
		if tc.ok && err != nil || !tc.ok && (err == nil || !strings.Contains(err.Error(), "-peak-gbps")) {
			t.Errorf("-peak-gbps %v: parseConfig() error %v; want ok = %v", tc.value, err, tc.ok)
		}
	}
}

// TestJSONNotFinite: a report holding a figure JSON cannot carry is an error, not an empty file.
func TestJSONNotFinite(t *testing.T) {
	rep := &report{Results: []result{{Context: "chain", Shape: "8x8", Format: "nf4", M: 1, LimitFraction: math.Inf(1)}}}
	if data, err := jsonOf(rep); err == nil {
		t.Errorf("jsonOf of an infinite fraction = %q, no error", data)
	}
	rep.Results[0].LimitFraction = 0.5
	data, err := jsonOf(rep)
	if err != nil || !strings.Contains(string(data), `"bandwidth_limit_fraction": 0.5`) {
		t.Errorf("jsonOf = %s, %v", data, err)
	}
}
