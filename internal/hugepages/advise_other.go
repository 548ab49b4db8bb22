//go:build !linux

package hugepages

// advise does nothing: transparent huge pages are a Linux facility.
func advise(mem []byte) int64 { return 0 }
