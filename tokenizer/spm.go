package tokenizer

import (
	"container/heap"
	"strconv"
)

// spaceMark is SentencePiece's visible space, U+2581 (▁), which stands for ' ' in its pieces.
const spaceMark = "\u2581"

// utf8Len is the length of the UTF-8 sequence a byte starts, by its high four bits, as llama.cpp
// cuts text into characters (a continuation or invalid byte alone counts 1; the length is not
// checked against the bytes that follow).
func utf8Len(b byte) int {
	switch {
	case b < 0xC0:
		return 1
	case b < 0xE0:
		return 2
	case b < 0xF0:
		return 3
	}
	return 4
}

// spmBigram is a candidate merge of symbols left and right into a token of the given score,
// size bytes long.
type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmSymbol is a node of the list SentencePiece merges over: text[start:start+n] of the piece.
type spmSymbol struct {
	start, n   int
	prev, next int
}

// encodePieces merges text (spaces already written ▁) as llama.cpp's SentencePiece session does
// and appends the ids: the symbols are its UTF-8 characters; the adjacent pair whose
// concatenation is the highest-scoring token merges first (leftmost on ties), until no pair is a
// token; each final symbol becomes its token, or is split back into the pair it was merged from,
// or falls back to byte tokens.
func (t *BPE) encodePieces(text string, out []int) []int {
	if text == "" {
		return out
	}
	var syms []spmSymbol
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		syms = append(syms, spmSymbol{start: off, n: n, prev: len(syms) - 1, next: len(syms) + 1})
		off += n
	}
	syms[len(syms)-1].next = -1
	// The highest score first, the leftmost among equal scores (llama.cpp's order).
	q := &mergeQueue[spmBigram]{before: func(a, b spmBigram) bool {
		return a.score > b.score || (a.score == b.score && a.left < b.left)
	}}
	revMerge := map[string][2]int{}
	add := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		piece := text[syms[left].start : syms[left].start+syms[left].n+syms[right].n]
		id, ok := t.ids[piece]
		if !ok {
			return
		}
		heap.Push(q, spmBigram{left: left, right: right, score: t.scores[id], size: len(piece)})
		revMerge[piece] = [2]int{left, right}
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(spmBigram)
		left, right := &syms[b.left], &syms[b.right]
		if left.n == 0 || right.n == 0 || left.n+right.n != b.size {
			continue // one of them merged since
		}
		left.n += right.n
		right.n = 0
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = b.left
		}
		add(left.prev, b.left)
		add(b.left, left.next)
	}
	var resegment func(s spmSymbol)
	resegment = func(s spmSymbol) {
		piece := text[s.start : s.start+s.n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			return
		}
		if pair, ok := revMerge[piece]; ok {
			resegment(syms[pair[0]])
			resegment(syms[pair[1]])
			return
		}
		for i := 0; i < len(piece); i++ {
			if id, ok := t.byteID(piece[i]); ok {
				out = append(out, id)
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		resegment(syms[i])
	}
	return out
}

// byteID returns the token of byte b as llama.cpp's byte_to_token finds it for SentencePiece:
// "<0xXX>" (upper-case hex), else the one-byte text; the unknown token if neither is in the
// vocabulary (llama.cpp fails there), or nothing without one.
func (t *BPE) byteID(b byte) (int, bool) {
	const hex = "0123456789ABCDEF"
	if id, ok := t.ids[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]; ok {
		return id, true
	}
	if id, ok := t.ids[string([]byte{b})]; ok {
		return id, true
	}
	return t.unk, t.unk >= 0
}

// byteToken reads the byte of a SentencePiece byte token "<0xXX>".
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[3:5], 16, 8)
	return byte(v), err == nil
}
