package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pkg/errors"
	"github.com/quanta-ml/quanta/lowering"
)

// goXLAPJRTVersion is the PJRT C API version of go-xla v0.1.4's headers (pkg/pjrt/pjrt_c_api.h,
// PJRT_API_MAJOR and PJRT_API_MINOR): the argument structs its calls pass.
var goXLAPJRTVersion = [2]int{0, 83}

// checkPJRTVersion compares a plugin's PJRT C API version with go-xla's: another major version
// is an error (the C API breaks compatibility across majors); within the major it returns a note
// for Info.Notes. A plugin newer than go-xla's headers receives their smaller argument structs,
// which it accepts for every field they have (the XLA CPU plugin of jaxlib 0.11.2, API 0.115,
// runs quanta's suite); an older one may lack functions go-xla calls.
func checkPJRTVersion(major, minor int) (string, error) {
	want := goXLAPJRTVersion
	switch {
	case major != want[0]:
		return "", errors.Errorf("the plugin implements PJRT C API %d.%d; go-xla v0.1.4 speaks %d.%d and cannot use another major version",
			major, minor, want[0], want[1])
	case minor > want[1]:
		return fmt.Sprintf("PJRT C API %d.%d, newer than go-xla v0.1.4's %d.%d: its calls pass %d.%d's argument structs",
			major, minor, want[0], want[1], want[0], want[1]), nil
	case minor < want[1]:
		return fmt.Sprintf("PJRT C API %d.%d, older than go-xla v0.1.4's %d.%d: functions added since may be missing",
			major, minor, want[0], want[1]), nil
	}
	return fmt.Sprintf("PJRT C API %d.%d, go-xla v0.1.4's own", major, minor), nil
}

// gpuXLAFlags adds the XLA flags of quanta's GPU formulations (lowering.SubchannelDequantizationFlag
// set true) to flags, for the GPU plugin at path: unless flags already sets it, and only when the
// plugin's library holds the flag's name (XLA aborts the process on a flag it does not know, and
// experimental flags come and go). It returns the new flags and a note for Info.Notes.
func gpuXLAFlags(flags, path string) (string, string) {
	name := strings.TrimPrefix(lowering.SubchannelDequantizationFlag, "--")
	if strings.Contains(flags, name) {
		return flags, ""
	}
	found, err := fileContains(path, []byte(name))
	switch {
	case err != nil:
		return flags, fmt.Sprintf("%s not set: reading %s: %s", lowering.SubchannelDequantizationFlag, path, oneLine(err.Error()))
	case !found:
		return flags, fmt.Sprintf("%s not set: the plugin does not know it", lowering.SubchannelDequantizationFlag)
	}
	flag := lowering.SubchannelDequantizationFlag + "=true"
	return strings.TrimSpace(flags + " " + flag), fmt.Sprintf("%s: %s", xlaFlagsEnv, flag)
}

// fileContains reports whether the file at path holds the bytes of needle, reading it in chunks
// (a CUDA plugin is hundreds of MB).
func fileContains(path string, needle []byte) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, 0, 4<<20)
	chunk := make([]byte, 4<<20)
	for {
		n, err := io.ReadFull(r, chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, needle) {
			return true, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		// Keep the tail that could start a match split across chunks.
		keep := min(len(buf), len(needle)-1)
		buf = append(buf[:0], buf[len(buf)-keep:]...)
	}
}
