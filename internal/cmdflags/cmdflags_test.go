package cmdflags_test

import (
	"testing"

	"github.com/quanta-ml/quanta/internal/cmdflags"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// TestNoArguments: an argument is refused naming it; a command line of flags alone passes.
func TestNoArguments(t *testing.T) {
	testutil.ArgumentRefused(t, cmdflags.NoArguments)
	t.Run("flags only", func(t *testing.T) {
		testutil.SetFlags(t)
		if err := cmdflags.NoArguments(); err != nil {
			t.Errorf("NoArguments() = %v with no argument; want nil", err)
		}
	})
}
