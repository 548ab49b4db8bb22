package hugepages

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		value   string
		on, bad bool
	}{{"", true, false}, {"1", true, false}, {" On ", true, false}, {"0", false, false}, {"off", false, false}, {"maybe", false, true}} {
		t.Run(fmt.Sprintf("%q", c.value), func(t *testing.T) {
			t.Setenv(Env, c.value)
			on, err := Enabled()
			if (err != nil) != c.bad || on != c.on {
				t.Fatalf("Enabled() with %s=%q = %v, %v; want %v, error %v", Env, c.value, on, err, c.on, c.bad)
			}
			if c.bad && !strings.Contains(err.Error(), Env) {
				t.Errorf("the error %q does not name %s", err, Env)
			}
		})
	}
}

// anonHuge returns the AnonHugePages kilobytes /proc/self/smaps gives the mapping holding addr.
func anonHuge(t *testing.T, addr uintptr) int64 {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, _ := strings.Cut(fields[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < b
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "AnonHugePages:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return 0
}

func TestAdvise(t *testing.T) {
	const n = 5 * Size / 4 // float32s: 5 MiB, at least one whole huge page wherever it starts
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i%1000) * 0.5
	}
	got := Advise(w)
	for i := range w {
		if w[i] != float32(i%1000)*0.5 {
			t.Fatalf("w[%d] = %g after Advise; want %g", i, w[i], float32(i%1000)*0.5)
		}
	}
	if got%Size != 0 || got > int64(4*n) {
		t.Fatalf("Advise reported %d bytes: not whole huge pages within the %d bytes", got, 4*n)
	}
	if runtime.GOOS != "linux" {
		if got != 0 {
			t.Fatalf("Advise on %s = %d; want 0", runtime.GOOS, got)
		}
		return
	}
	if got == 0 {
		mode, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
		t.Skipf("the kernel backed none (transparent_hugepage: %s)", strings.TrimSpace(string(mode)))
	}
	if kb := anonHuge(t, uintptr(unsafe.Pointer(&w[n/2]))); kb*1024 < got {
		t.Errorf("Advise reported %d bytes, but the mapping holds %d KiB of huge pages", got, kb)
	}
	runtime.KeepAlive(w)
}

func TestAdviseNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		flat any
		env  string
	}{
		{"below a huge page", make([]byte, Size-1), ""},
		{"empty", []float64{}, ""},
		{"not a slice", 3, ""},
		{"turned off", make([]byte, 3*Size), "0"},
		{"invalid setting", make([]byte, 3*Size), "maybe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(Env, c.env)
			if got := Advise(c.flat); got != 0 {
				t.Errorf("Advise = %d; want 0", got)
			}
		})
	}
}
