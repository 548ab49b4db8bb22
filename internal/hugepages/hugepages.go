package hugepages

import (
	"os"
	"reflect"
	"unsafe"

	"github.com/quanta-ml/quanta/internal/fileio"
)

// Env names the environment variable that turns Advise off (0, false, no, off); unset or a true
// value leaves it on.
const Env = "QUANTA_HUGE_PAGES"

// Size is the size of a huge page Advise asks for: a PMD-mapped page on x86-64 and arm64 with 4
// KiB base pages.
const Size = 2 << 20

// Enabled reports whether Advise is on: Env unset or true. An invalid value is an error naming
// it.
func Enabled() (bool, error) {
	v, ok := os.LookupEnv(Env)
	if !ok || v == "" {
		return true, nil
	}
	return fileio.ParseBool("quanta", Env, v)
}

// Advise asks for huge pages behind the whole 2 MiB pages of flat, a slice of any element type
// (a host or shared device buffer's data), and returns how many of its bytes the kernel backed
// with them (0 where it could not, or where Env turned it off). flat must stay allocated while
// Advise runs; its values are unchanged.
func Advise(flat any) int64 {
	if on, err := Enabled(); err != nil || !on {
		return 0
	}
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice || v.Len() == 0 {
		return 0
	}
	base := v.UnsafePointer()
	n := uintptr(v.Len()) * v.Type().Elem().Size()
	start := uintptr(base)
	first := (start+Size-1)&^(Size-1) - start // offset of the first whole page
	if first >= n {
		return 0
	}
	whole := (n - first) &^ (Size - 1)
	if whole == 0 {
		return 0
	}
	return advise(unsafe.Slice((*byte)(unsafe.Add(base, first)), whole))
}
