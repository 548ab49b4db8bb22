package hugepages

import "golang.org/x/sys/unix"

// advise marks mem (whole huge pages) for huge pages and collapses it now; without
// MADV_COLLAPSE (Linux before 6.1) the mark alone lets khugepaged collapse it later, which is
// not counted.
func advise(mem []byte) int64 {
	if unix.Madvise(mem, unix.MADV_HUGEPAGE) != nil {
		return 0
	}
	if unix.Madvise(mem, unix.MADV_COLLAPSE) != nil {
		return 0
	}
	return int64(len(mem))
}
