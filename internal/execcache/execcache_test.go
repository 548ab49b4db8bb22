package execcache_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/quanta-ml/quanta/internal/execcache"
	"github.com/quanta-ml/quanta/internal/testutil"
)

// double builds x+x and reports one result tree, named after the argument's.
type double struct{}

func (double) Build(inDefs []string, nodes []*graph.Node) ([]*graph.Node, []string) {
	return []*graph.Node{graph.Add(nodes[0], nodes[0])}, []string{inDefs[0] + "*2"}
}

func TestCache(t *testing.T) {
	backend := testutil.Backend(t)
	var c execcache.Cache[string]
	compiled := 0
	compile := func(graphFn func([]*graph.Node) []*graph.Node) (*graph.Exec, error) {
		compiled++
		return graph.NewExecAny(backend, graphFn)
	}
	for range 2 {
		entry, err := c.Get("f32[2]", double{}, []string{"x"}, compile)
		if err != nil {
			t.Fatalf("%+v", err)
		}
		out := entry.Exec.MustExec([]float32{1, 2})
		if got := out[0].Value().([]float32); got[0] != 2 || got[1] != 4 || len(entry.OutDefs) != 1 || entry.OutDefs[0] != "x*2" {
			t.Errorf("entry gives %v with trees %v, want [2 4] and [x*2]", got, entry.OutDefs)
		}
	}
	if compiled != 1 {
		t.Errorf("compiled %d times for one key, want 1", compiled)
	}
	c.Finalize()
	if _, err := c.Get("f32[2]", double{}, []string{"x"}, compile); err != nil || compiled != 2 {
		t.Errorf("after Finalize: %v, compiled %d times, want a new compilation", err, compiled)
	}
	c.Finalize()
}
