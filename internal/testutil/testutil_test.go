package testutil

import (
	"os"
	"testing"
)

func TestBackend(t *testing.T) {
	if backend := Backend(t); backend.NumDevices() < 1 {
		t.Errorf("backend %q has no devices", backend.Name())
	}
}

func TestSlow(t *testing.T) {
	ran := false
	t.Run("slow", func(t *testing.T) {
		Slow(t)
		ran = true
	})
	if want := os.Getenv(TestAllEnv) == "1"; ran != want {
		t.Errorf("with %s=%q the slow test ran=%v, want %v", TestAllEnv, os.Getenv(TestAllEnv), ran, want)
	}
}
