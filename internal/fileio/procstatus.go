package fileio

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/pkg/errors"
)

// ProcStatus returns a memory figure of the process in bytes from Linux's /proc/self/status:
// field "VmRSS" the resident memory, "VmHWM" its peak. An error where there is no such file or
// field.
func ProcStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, errors.Wrap(err, "fileio.ProcStatus")
	}
	defer f.Close()
	return procStatusField(f, field)
}

// procStatusField reads field's "N kB" line from the text of a /proc/<pid>/status file.
func procStatusField(r io.Reader, field string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		n, err := strconv.ParseInt(strings.TrimSpace(kb), 10, 64)
		if !ok || err != nil || n < 0 || n > 1<<53 {
			return 0, errors.Errorf("fileio.ProcStatus: %s is %q; accepted: a count of kB", field, strings.TrimSpace(rest))
		}
		return n << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, errors.Wrap(err, "fileio.ProcStatus")
	}
	return 0, errors.Errorf("fileio.ProcStatus: no %s in the process status", field)
}
