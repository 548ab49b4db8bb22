package qlayers_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/qlayers"
)

// TestLoadAdaptersSpecialFile: an adapter_config.json that is a device is refused by name, not
// read until memory runs out (os.ReadFile of /dev/zero never ends).
func TestLoadAdaptersSpecialFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, qlayers.AdapterConfigFile)); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { done <- qlayers.LoadAdapters(context.New(), dir, qlayers.AdapterOptions{}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Errorf("LoadAdapters: error %v; want one refusing a file that is not a regular file", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("LoadAdapters: still reading adapter_config.json (/dev/zero) after 3s")
	}
}
