package minilm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quanta-ml/quanta/models/minilm"
)

// TestConfigFromJSONSpecialFile: config.json that is a device (or a FIFO) is refused by name, as
// safetensors.Open and gguf.Open refuse one: os.ReadFile of /dev/zero never ends and grows
// without bound (over a gigabyte a second).
func TestConfigFromJSONSpecialFile(t *testing.T) {
	done := make(chan error, 1)
	go func() {
		_, err := minilm.ConfigFromJSON("/dev/zero")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Errorf("ConfigFromJSON(/dev/zero): error %v; want one refusing a file that is not a regular file", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ConfigFromJSON(/dev/zero): still reading after 3s")
	}
}
