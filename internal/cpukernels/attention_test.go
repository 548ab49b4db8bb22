package cpukernels

import (
	"errors"
	"math"
	"testing"

	"github.com/x448/float16"
)

// attnCase is one attention call: shapes, and which positions each query row sees.
type attnCase struct {
	name                                     string
	batch, heads, kv, seq, length, nKeys, hd int
	visible                                  func(s, t int) bool
}

func causalFrom(start int) func(s, t int) bool { return func(s, t int) bool { return t <= start+s } }

var attnCases = []attnCase{
	{"decode, SmolLM2 heads", 1, 9, 3, 1, 64, 40, 64, causalFrom(39)},
	{"decode, whole cache", 1, 4, 4, 1, 33, 33, 8, causalFrom(32)},
	{"chunk of 5, head width 12", 2, 6, 2, 5, 48, 20, 12, causalFrom(15)},
	{"one kv head, ragged head width", 1, 8, 1, 3, 17, 17, 5, causalFrom(14)},
	{"sliding window", 1, 4, 2, 2, 64, 64, 16, func(s, t int) bool { return t <= 60+s && t > 60+s-8 }},
	{"long window, pooled", 1, 16, 4, 1, 4096, 3000, 64, causalFrom(2999)},
	{"sliding window past whole key blocks", 1, 4, 2, 3, 256, 200, 16, func(s, t int) bool { return t <= 190+s && t > 190+s-8 }},
	{"decode, window past the filled keys", 1, 9, 3, 1, 1024, 1024, 64, causalFrom(520)},
	// from QK_ATTENTION_MANY (32) positions on: the prompt path
	{"prompt, SmolLM2 heads", 1, 9, 3, 100, 128, 100, 64, causalFrom(0)},
	{"prompt after a cached prefix, two batches", 2, 4, 2, 70, 160, 150, 16, causalFrom(80)},
	{"prompt, one kv head, ragged head width", 1, 3, 1, 33, 40, 40, 5, causalFrom(7)},
	{"prompt, sliding window", 1, 4, 2, 130, 200, 130, 8, func(s, t int) bool { return t <= s && t > s-40 }},
}

// attnInputs draws q, keys and values and builds the mask of c.
func attnInputs(c attnCase, seed uint64) (q, keys, values []float32, visible []uint8) {
	r := newRand(seed)
	draw := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	q = draw(c.batch * c.heads * c.seq * c.hd)
	keys, values = draw(c.batch*c.kv*c.length*c.hd), draw(c.batch*c.kv*c.length*c.hd)
	visible = make([]uint8, c.seq*c.nKeys)
	for s := range c.seq {
		for t := range c.nKeys {
			if c.visible(s, t) {
				visible[s*c.nKeys+t] = 1
			}
		}
	}
	return q, keys, values, visible
}

// attnWant is the attention in float64, from its definition.
func attnWant(c attnCase, q, keys, values []float32, visible []uint8, scale float64) []float64 {
	out := make([]float64, len(q))
	for b := range c.batch {
		for h := range c.heads {
			kvh := b*c.kv + h/(c.heads/c.kv)
			for s := range c.seq {
				row := ((b*c.heads+h)*c.seq + s) * c.hd
				scores := make([]float64, c.nKeys)
				best := math.Inf(-1)
				for t := range c.nKeys {
					scores[t] = math.Inf(-1)
					if visible[s*c.nKeys+t] == 0 {
						continue
					}
					dot := 0.0
					for d := range c.hd {
						dot += float64(q[row+d]) * float64(keys[(kvh*c.length+t)*c.hd+d])
					}
					scores[t] = dot * scale
					best = math.Max(best, scores[t])
				}
				total := 0.0
				for t := range scores {
					scores[t] = math.Exp(scores[t] - best)
					total += scores[t]
				}
				for t := range scores {
					for d := range c.hd {
						out[row+d] += scores[t] / total * float64(values[(kvh*c.length+t)*c.hd+d])
					}
				}
			}
		}
	}
	return out
}

// TestAttention checks the kernel on every path against the definition in float64, with keys
// past nKeys (a cache's unfilled part) set to NaN so that reading them would show.
func TestAttention(t *testing.T) {
	for _, c := range attnCases {
		q, keys, values, visible := attnInputs(c, uint64(len(c.name)))
		for b := range c.batch * c.kv {
			for t := c.nKeys; t < c.length; t++ {
				for d := range c.hd {
					keys[(b*c.length+t)*c.hd+d], values[(b*c.length+t)*c.hd+d] = float32(math.NaN()), float32(math.NaN())
				}
			}
		}
		scale := 1 / math.Sqrt(float64(c.hd))
		want := attnWant(c, q, keys, values, visible, scale)
		t.Run(c.name, func(t *testing.T) {
			forEachISA(t, func(t *testing.T) {
				out := make([]float32, len(q))
				if err := attention(out, q, keys, values, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, float32(scale)); err != nil {
					t.Fatal(err)
				}
				for i, w := range want {
					if d := math.Abs(float64(out[i]) - w); !(d <= 1e-5*(1+math.Abs(w))) {
						t.Fatalf("element %d = %g, want %g", i, out[i], w)
					}
				}
			})
		})
	}
}

// TestAttentionHalfCache: a float16 cache gives, on every path, the bits of a float32 cache holding
// the same values (each half converted exactly as it is read), for random halves and for the
// halves at the ends of the range (subnormals, the largest finite).
func TestAttentionHalfCache(t *testing.T) {
	extremes := []float16.Float16{0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x8000}
	for _, c := range attnCases {
		q, keys, values, visible := attnInputs(c, uint64(len(c.name))+11)
		halves := func(f []float32) ([]uint16, []float32) {
			h, back := make([]uint16, len(f)), make([]float32, len(f))
			for i, v := range f {
				x := float16.Fromfloat32(v)
				if i%97 == 5 {
					x = extremes[i%len(extremes)]
				}
				h[i], back[i] = x.Bits(), x.Float32()
			}
			return h, back
		}
		hk, fk := halves(keys)
		hv, fv := halves(values)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		t.Run(c.name, func(t *testing.T) {
			forEachISA(t, func(t *testing.T) {
				want, got := make([]float32, len(q)), make([]float32, len(q))
				if err := attention(want, q, fk, fv, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, scale); err != nil {
					t.Fatal(err)
				}
				if err := attention(got, q, hk, hv, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, scale); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("element %d = %g from halves, %g from their float32 values", i, got[i], want[i])
					}
				}
			})
		})
	}
}

// TestAttentionNoKeyVisible: a row that sees no key is NaN, as the softmax over -inf of the
// formulation; the other rows are unaffected, within one block of keys and over several, and on
// the prompt path for one row and for a whole block of positions; so are all rows of a call
// where none sees a key.
func TestAttentionNoKeyVisible(t *testing.T) {
	for _, tc := range []struct{ keys, seq, blind int }{
		{4, 2, 1}, {130, 2, 1}, {130, 2, 2}, // per-row path, one and several key blocks; no row sees a key
		{130, 40, 1}, {100, 70, 64}, // prompt path: one row; a whole block of positions
	} {
		c := attnCase{"", 1, 2, 1, tc.seq, tc.keys, tc.keys, 3, func(s, t int) bool { return s >= tc.blind }}
		q, k, v, visible := attnInputs(c, 3)
		out := make([]float32, len(q))
		if err := attention(out, q, k, v, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, 1); err != nil {
			t.Fatal(err)
		}
		for h := range c.heads {
			for s := range c.seq {
				for d := range c.hd {
					if x := out[(h*c.seq+s)*c.hd+d]; math.IsNaN(float64(x)) != (s < tc.blind) {
						t.Errorf("%+v: head %d row %d element %d = %g; want NaN only in the rows that see nothing", tc, h, s, d, x)
					}
				}
			}
		}
	}
}

// TestAttentionThreads: the result is the same bits whatever the number of threads.
func TestAttentionThreads(t *testing.T) {
	defer SetThreads(0)
	for _, c := range attnCases { // the thread count also sets how many heads a task serves
		q, keys, values, visible := attnInputs(c, 7)
		var first []float32
		for _, threads := range []int{1, 2, 3, 8} {
			SetThreads(threads)
			out := make([]float32, len(q))
			if err := attention(out, q, keys, values, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, 0.125); err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = out
				continue
			}
			for i := range out {
				if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%s, %d threads: element %d = %g, with 1 thread %g", c.name, threads, i, out[i], first[i])
				}
			}
		}
	}
}

func TestAttentionErrors(t *testing.T) {
	one := []float32{1}
	vis := []uint8{1}
	for _, tc := range []struct {
		name                                     string
		batch, heads, kv, seq, length, nKeys, hd int
	}{
		{"kv not dividing heads", 1, 3, 2, 1, 1, 1, 1},
		{"no key/value head", 1, 1, 0, 1, 1, 1, 1},
		{"keys past the length", 1, 1, 1, 1, 1, 2, 1},
		{"no keys", 1, 1, 1, 1, 1, 0, 1},
		{"too many keys", 1, 1, 1, 1, 1 << 19, 1<<18 + 1, 1},
		{"negative head width", 1, 1, 1, 1, 1, 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := attention(one, one, one, one, vis, tc.batch, tc.heads, tc.kv, tc.seq, tc.length, tc.nKeys, tc.hd, 1)
			if !errors.Is(err, ErrArgument) {
				t.Errorf("got %v, want an error wrapping ErrArgument", err)
			}
		})
	}
}

// TestAttentionNaNScore: a visible key whose score is NaN (a NaN in the cache) makes the rows that
// see it NaN on every path, as the softmax of the formulation does, and leaves the others alone:
// per row, over several key blocks, and on the prompt path.
func TestAttentionNaNScore(t *testing.T) {
	for _, tc := range []struct{ seq, keys, bad int }{{1, 20, 7}, {2, 130, 100}, {40, 40, 9}} {
		c := attnCase{"", 1, 2, 1, tc.seq, tc.keys, tc.keys, 8, causalFrom(tc.keys - tc.seq)}
		q, k, v, visible := attnInputs(c, 5)
		k[tc.bad*c.hd+3] = float32(math.NaN())
		forEachISA(t, func(t *testing.T) {
			out := make([]float32, len(q))
			if err := attention(out, q, k, v, visible, c.batch, c.heads, c.kv, c.seq, c.length, c.nKeys, c.hd, 0.5); err != nil {
				t.Fatal(err)
			}
			for h := range c.heads {
				for s := range c.seq {
					sees := c.visible(s, tc.bad)
					for d := range c.hd {
						if x := out[(h*c.seq+s)*c.hd+d]; math.IsNaN(float64(x)) != sees {
							t.Fatalf("%+v: head %d row %d element %d = %g; want NaN exactly in the rows that see key %d",
								tc, h, s, d, x, tc.bad)
						}
					}
				}
			}
		})
	}
}
