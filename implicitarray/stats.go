package implicitarray

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
)

// Key names an (op, implicit type) pair in Stats and in warnings.
type Key struct {
	Op   Op
	Type string // as TypeName, e.g. "*nf4.Array"
}

// String returns "op(type)".
func (k Key) String() string { return fmt.Sprintf("%s(%s)", k.Op, k.Type) }

// Stats counts what dispatch did since the start or the last ResetStats: which handlers ran, where
// the generic fallback materialized operands, and how often each implicit type was materialized
// (by the fallback, by handlers, or by a direct call of Materialize). Tests use it to prove a fused
// path did not materialize.
type Stats struct {
	// Handled counts calls answered by a registered handler (the one that returned without
	// deferring with Call.Next), per op and the implicit type of the first implicit operand.
	Handled map[Key]int
	// Fallbacks counts calls where no handler matched and the operands were materialized, per op
	// and implicit operand type (a call with two implicit operands counts for both types).
	Fallbacks map[Key]int
	// Requantizations counts calls a handler answered by materializing the operand and quantizing
	// the result again, a second rounding (an NF4 reshape or broadcast that moves the block axis,
	// an int8 reshape), per op and type (Call.Requantizing).
	Requantizations map[Key]int
	// Materializations counts materialization steps per implicit type name.
	Materializations map[string]int
}

type statsRecorder struct {
	mu     sync.Mutex
	s      Stats
	warned map[warnKey]bool
	logger *slog.Logger
	// loggerSet tells a deliberate SetLogger(nil) (silence) from the default.
	loggerSet bool
}

var stats = newStatsRecorder()

func newStatsRecorder() *statsRecorder {
	r := &statsRecorder{}
	r.reset()
	return r
}

func (r *statsRecorder) reset() {
	r.s = Stats{Handled: map[Key]int{}, Fallbacks: map[Key]int{}, Requantizations: map[Key]int{}, Materializations: map[string]int{}}
	r.warned = map[warnKey]bool{}
}

func (r *statsRecorder) countMaterialize(a Array) {
	r.mu.Lock()
	r.s.Materializations[TypeName(a)]++
	r.mu.Unlock()
}

func (r *statsRecorder) countHandled(op Op, typeName string) {
	r.mu.Lock()
	r.s.Handled[Key{op, typeName}]++
	r.mu.Unlock()
}

// countFallback records a fallback of op on the implicit operands.
func (r *statsRecorder) countFallback(op Op, operands []Value) {
	r.count(op, operands, fallbackEvent)
}

// countRequantization records that a handler of op re-quantized the implicit operand a.
func (r *statsRecorder) countRequantization(op Op, a Array) {
	r.count(op, []Value{a}, requantizationEvent)
}

// event is a kind of counted densification: its counters in Stats and its warning.
type event struct {
	counters func(*Stats) map[Key]int
	message  string
}

var (
	fallbackEvent = event{func(s *Stats) map[Key]int { return s.Fallbacks },
		"implicitarray: no handler matched, materializing the implicit operand (warned once per op and type)"}
	requantizationEvent = event{func(s *Stats) map[Key]int { return s.Requantizations },
		"implicitarray: materializing the implicit operand and quantizing the result again, a second rounding (warned once per op and type)"}
)

// count adds one to e's counter of op for each implicit operand type (once per type, however
// many operands have it) and logs e's warning where the type's policy is FallbackWarn and it was
// not given yet.
func (r *statsRecorder) count(op Op, operands []Value, e event) {
	r.mu.Lock()
	var counted, toWarn []Key
	for _, v := range operands {
		a, ok := v.(Array)
		if !ok {
			continue
		}
		k := Key{op, TypeName(a)}
		if slices.Contains(counted, k) {
			continue
		}
		counted = append(counted, k)
		e.counters(&r.s)[k]++
		if wk := (warnKey{k, e.message}); fallbackOf(a) == FallbackWarn && !r.warned[wk] {
			r.warned[wk] = true
			toWarn = append(toWarn, k)
		}
	}
	logger := r.logger
	if !r.loggerSet {
		logger = slog.Default()
	}
	r.mu.Unlock()
	if logger == nil {
		return
	}
	for _, k := range toWarn {
		logger.Warn(e.message, "op", string(k.Op), "type", k.Type)
	}
}

// warnKey is a warning given: its op and type, and which warning.
type warnKey struct {
	Key
	message string
}

// CurrentStats returns a copy of the counters.
func CurrentStats() Stats {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	return Stats{
		Handled:          maps.Clone(stats.s.Handled),
		Fallbacks:        maps.Clone(stats.s.Fallbacks),
		Requantizations:  maps.Clone(stats.s.Requantizations),
		Materializations: maps.Clone(stats.s.Materializations),
	}
}

// ResetStats zeroes the counters and forgets which warnings were given, so they are given again.
func ResetStats() {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	stats.reset()
}

// SetLogger sets where fallback warnings go; nil silences them. The default is slog.Default().
func SetLogger(logger *slog.Logger) {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	stats.logger = logger
	stats.loggerSet = true
}
