// Package execcache holds the compiled graphs of one function, one per key of its arguments: the
// cache behind implicitarray.Exec and mesh.Exec. D is the type of the argument and result trees
// (implicitarray's *TreeDef; a type parameter so that implicitarray itself can use the package).
package execcache

import (
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Builder builds the graph of a function on the nodes of its argument trees and returns the
// result nodes and trees (implicitarray.Func).
type Builder[D any] interface {
	Build(inDefs []D, nodes []*graph.Node) ([]*graph.Node, []D)
}

// Entry is one compiled graph and the trees of its results.
type Entry[D any] struct {
	Exec    *graph.Exec
	OutDefs []D
}

// Cache holds the entries by key. Its zero value is empty and ready; Get is safe for concurrent
// use, Finalize must not run while an entry is in use.
type Cache[D any] struct {
	mu      sync.Mutex
	entries map[string]*Entry[D]
}

// Get returns the entry of key, compiling it on first use: compile returns the graph.Exec of
// graphFn, which builds fn on the argument trees inDefs and records the result trees.
func (c *Cache[D]) Get(key string, fn Builder[D], inDefs []D,
	compile func(graphFn func([]*graph.Node) []*graph.Node) (*graph.Exec, error)) (*Entry[D], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if entry, ok := c.entries[key]; ok {
		return entry, nil
	}
	entry := &Entry[D]{}
	exec, err := compile(func(nodes []*graph.Node) []*graph.Node {
		var out []*graph.Node
		out, entry.OutDefs = fn.Build(inDefs, nodes)
		return out
	})
	if err != nil {
		return nil, err
	}
	entry.Exec = exec
	if c.entries == nil {
		c.entries = map[string]*Entry[D]{}
	}
	c.entries[key] = entry
	return entry, nil
}

// Finalize releases the compiled graphs and empties the cache.
func (c *Cache[D]) Finalize() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, entry := range c.entries {
		entry.Exec.Finalize()
	}
	c.entries = nil
}
