package llama

import (
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/quanta-ml/quanta/internal/modelbase"
	"github.com/quanta-ml/quanta/models"
)

// fuseGroups asks fuse whether the q/k/v and the gate/up kernels of every block may be stored
// fused, and registers the groups that may with vars.
func fuseGroups(ctx *context.Context, vars *modelbase.Vars, cfg Config, fuse models.FuseFunc) (qkv, gateUp bool) {
	if fuse == nil {
		return false, false
	}
	q, kv := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	groups := []struct {
		name    string
		parts   []string
		outDims []int
		fused   *bool
	}{
		{AttnQKV, []string{AttnQ, AttnK, AttnV}, []int{q, kv, kv}, &qkv},
		{FFNGateUp, []string{FFNGate, FFNUp}, []int{cfg.FFNDim, cfg.FFNDim}, &gateUp},
	}
	for _, grp := range groups {
		fused, parts := make([]string, cfg.Layers), make([][]string, cfg.Layers)
		all := true
		for i := range cfg.Layers {
			layer := ctx.In(LayerScope(i))
			fused[i] = layer.In(grp.name).Scope()
			for _, p := range grp.parts {
				parts[i] = append(parts[i], layer.In(p).Scope())
			}
			all = all && fuse(fused[i], parts[i], grp.outDims)
		}
		if all {
			*grp.fused = true
			for i := range cfg.Layers {
				vars.Fuse(fused[i], parts[i])
			}
		}
	}
	return qkv, gateUp
}
