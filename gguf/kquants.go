package gguf

import "math"

// ggml's K-quant reference quantizers (quantize_row_q{2..6}_K_ref) and the scale searches they
// use, with the same float32 operations in the same order: every product that meets an addition
// is rounded explicitly (float32(a*b)), so no compiler fuses it into a multiply-add the reference
// build (x86-64 without FMA) does not have.

// makeQKX2 is ggml's make_qkx2_quants: codes L in [0, nmax] of x with a scale and a min (x ≈
// scale·L − theMin), searched over nstep+1 trial scales around nmax/(max−min) by weighted least
// squares, with the weighted absolute (useMAD) or squared error deciding. Laux is scratch.
func makeQKX2(nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, useMAD bool) (scale, theMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L[:n])
		return 0, -lo
	}
	errorOf := func(scale, lo float32, L []uint8) float32 {
		var e float32
		for i := range n {
			diff := float32(scale*float32(L[i])) + lo - x[i]
			if useMAD {
				diff = float32(math.Abs(float64(diff)))
			} else {
				diff = float32(diff * diff)
			}
			e += float32(weights[i] * diff)
		}
		return e
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	for i := range n {
		L[i] = uint8(max(0, min(nmax, nearestInt(iscale*(x[i]-lo)))))
	}
	bestError := errorOf(scale, lo, L)
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := max(0, min(nmax, nearestInt(iscale*(x[i]-lo))))
			Laux[i] = uint8(l)
			w, fl := weights[i], float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			if curError := errorOf(thisScale, thisMin, Laux); curError < bestError {
				copy(L[:n], Laux[:n])
				bestError, scale, lo = curError, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// makeQ3 is ggml's make_q3_quants with do_rmse: signed codes L in [-nmax, nmax) of x nearest to
// x/scale with scale = max/-nmax, then improved one code at a time (up to 5 sweeps) for the
// x²-weighted least-squares fit; it returns that fit's scale and leaves L offset by nmax.
func makeQ3(nmax int, x []float32, L []int8) float32 {
	vmax, amax := absMaxSigned(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	iscale := float32(-nmax) / vmax
	var sumlx, suml2 float32
	for i, v := range x {
		l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
		L[i] = int8(l)
		w := float32(v * v)
		sumlx += float32(float32(w*v) * float32(l))
		suml2 += float32(float32(w*float32(l)) * float32(l))
	}
	for range 5 {
		changed := false
		for i, v := range x {
			w, li := float32(v*v), float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if slx > 0 {
				sl2 := suml2 - float32(float32(w*li)*li)
				newL := max(-nmax, min(nmax-1, nearestInt(float32(v*sl2)/slx)))
				if newL != int(L[i]) {
					fl := float32(newL)
					slx += float32(float32(w*v) * fl)
					sl2 += float32(float32(w*fl) * fl)
					if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i], sumlx, suml2 = int8(newL), slx, sl2
						changed = true
					}
				}
			}
		}
		if !changed {
			break
		}
	}
	for i := range x {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQX is ggml's make_qx_quants with rmse_type 1 and no importance weights: signed codes in
// [-nmax, nmax) of x for the scale max/-nmax and 18 neighbours -(nmax ± 0.1·k)/max, keeping the
// one of the best x²-weighted least-squares fit; L is left offset by nmax.
func makeQX(nmax int, x []float32, L []int8) float32 {
	vmax, amax := absMaxSigned(x)
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	fit := func(iscale float32, store bool) (sumlx, suml2 float32) {
		for i, v := range x {
			l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
			if store {
				L[i] = int8(nmax + l)
			}
			w, fl := float32(v*v), float32(l)
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		return sumlx, suml2
	}
	sumlx, suml2 := fit(float32(-nmax)/vmax, true)
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale := -(float32(nmax) + float32(0.1*float32(is))) / vmax
		sumlx, suml2 = fit(iscale, false)
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			fit(iscale, true)
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// packQ2Bits packs 256 2-bit codes as Q2_K and Q3_K store them: byte l of the 32 of each 128
// codes holds codes l, l+32, l+64, l+96 in bits 0-1, 2-3, 4-5, 6-7.
func packQ2Bits(L []uint8, qs []byte) {
	for j := 0; j < 256; j += 128 {
		for l := range 32 {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// quantizeQ2_K: per 16 elements a scale and a min (makeQKX2 with |x| weights), quantized to 4 bits
// against the block's largest (d = max/15, dmin likewise); codes recomputed for the stored scales.
func quantizeQ2_K(src []float32, dst []byte) {
	var L, Laux [256]uint8
	var weights [16]float32
	var mins, scales [16]float32
	const q4scale = 15
	for b := range len(src) / 256 {
		x, blk := src[256*b:256*b+256], dst[84*b:84*b+84]
		sc, qs := blk[0:16], blk[16:80]
		var maxScale, maxMin float32
		for j := range 16 {
			xj := x[16*j : 16*j+16]
			for l, v := range xj {
				weights[l] = float32(math.Abs(float64(v)))
			}
			scales[j], mins[j] = makeQKX2(3, xj, weights[:], L[16*j:16*j+16], Laux[:16], -0.5, 0.1, 15, true)
			if scales[j] > maxScale {
				maxScale = scales[j]
			}
			if mins[j] > maxMin {
				maxMin = mins[j]
			}
		}
		if maxScale > 0 {
			iscale := q4scale / maxScale
			for j := range 16 {
				sc[j] = uint8(nearestInt(iscale * scales[j]))
			}
			putF16(blk[80:], maxScale/q4scale)
		} else {
			clear(sc)
			putF16(blk[80:], 0)
		}
		if maxMin > 0 {
			iscale := q4scale / maxMin
			for j := range 16 {
				sc[j] |= uint8(nearestInt(iscale*mins[j]) << 4)
			}
			putF16(blk[82:], maxMin/q4scale)
		} else {
			putF16(blk[82:], 0)
		}
		d, dmin := f16(blk[80:]), f16(blk[82:])
		for j := range 16 {
			dj := d * float32(sc[j]&0x0F)
			if dj == 0 {
				continue
			}
			dm := dmin * float32(sc[j]>>4)
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = uint8(max(0, min(3, nearestInt((x[i]+dm)/dj))))
			}
		}
		packQ2Bits(L[:], qs)
	}
}

// quantizeQ3_K: per 16 elements a signed scale (makeQ3), quantized to 6 bits against the block's
// largest (d = max/-32); codes in [-4, 3] recomputed for the stored scales, their bit 2 in hmask.
func quantizeQ3_K(src []float32, dst []byte) {
	var L [256]int8
	var scales [16]float32
	for b := range len(src) / 256 {
		x, blk := src[256*b:256*b+256], dst[110*b:110*b+110]
		hmask, qs, sc := blk[0:32], blk[32:96], blk[96:108]
		for j := range 16 {
			scales[j] = makeQ3(4, x[16*j:16*j+16], L[16*j:16*j+16])
		}
		maxScale, _ := absMaxSigned(scales[:])
		clear(sc)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := range 16 {
				l := int(int8(nearestInt(iscale * scales[j])))
				l = max(-32, min(31, l)) + 32
				if j < 8 {
					sc[j] = uint8(l & 0x0F)
				} else {
					sc[j-8] |= uint8((l & 0x0F) << 4)
				}
				sc[8+j%4] |= uint8((l >> 4) << (2 * (j / 4)))
			}
			putF16(blk[108:], 1/iscale)
		} else {
			putF16(blk[108:], 0)
		}
		d := f16(blk[108:])
		for j := range 16 {
			dj := d * float32(int8(q3KScale(sc, j)-32))
			if dj == 0 {
				continue
			}
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = int8(max(-4, min(3, nearestInt(x[i]/dj))) + 4)
			}
		}
		clear(hmask)
		var codes [256]uint8
		for j := range 256 {
			c := uint8(L[j])
			if L[j] > 3 {
				hmask[j%32] |= 1 << (j / 32)
				c -= 4
			}
			codes[j] = c
		}
		packQ2Bits(codes[:], qs)
	}
}

// kQuant is the shared part of Q4_K and Q5_K: per 32 elements a scale and a min (makeQKX2 with
// weights sqrt(mean x²) + |x|), quantized to 6 bits against the block's largest (d = max/63, dmin
// likewise) into the 12 scale bytes; codes in [0, nmax] recomputed for the stored scales into L.
func kQuant(x []float32, blk []byte, nmax int, rmin float32, nstep int, L *[256]uint8) {
	var Laux [32]uint8
	var weights [32]float32
	var mins, scales [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xj := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xj {
			sumX2 += float32(v * v)
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xj {
			weights[l] = avX + float32(math.Abs(float64(v)))
		}
		scales[j], mins[j] = makeQKX2(nmax, xj, weights[:], L[32*j:32*j+32], Laux[:], rmin, 0.1, nstep, false)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := blk[4:16]
	for j := range 8 {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0x0F | (lm&0x0F)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putF16(blk, maxScale/63)
	putF16(blk[2:], maxMin/63)
	d, dmin := f16(blk), f16(blk[2:])
	for j := range 8 {
		dj, dm := kScaleMin(d, dmin, sc, j)
		if dj == 0 {
			continue
		}
		for i := 32 * j; i < 32*j+32; i++ {
			L[i] = uint8(max(0, min(nmax, nearestInt((x[i]+dm)/dj))))
		}
	}
}

// quantizeQ4_K: kQuant with 4-bit codes, packed as decodeQ4_K reads them.
func quantizeQ4_K(src []float32, dst []byte) {
	var L [256]uint8
	for b := range len(src) / 256 {
		blk := dst[144*b : 144*b+144]
		kQuant(src[256*b:256*b+256], blk, 15, -1, 20, &L)
		qs := blk[16:144]
		for i := range 4 {
			for l := range 32 {
				qs[32*i+l] = L[64*i+l] | L[64*i+l+32]<<4
			}
		}
	}
}

// quantizeQ5_K: kQuant with 5-bit codes, packed as decodeQ5_K reads them.
func quantizeQ5_K(src []float32, dst []byte) {
	var L [256]uint8
	for b := range len(src) / 256 {
		blk := dst[176*b : 176*b+176]
		kQuant(src[256*b:256*b+256], blk, 31, -0.5, 15, &L)
		qh, qs := blk[16:48], blk[48:176]
		clear(qh)
		for i := range 4 {
			for l := range 32 {
				l1, l2 := L[64*i+l], L[64*i+l+32]
				if l1 > 15 {
					l1 -= 16
					qh[l] |= 1 << (2 * i)
				}
				if l2 > 15 {
					l2 -= 16
					qh[l] |= 2 << (2 * i)
				}
				qs[32*i+l] = l1 | l2<<4
			}
		}
	}
}

// quantizeQ6_K: per 16 elements a signed scale (makeQX), quantized to int8 against the block's
// largest (d = max/-128); codes in [-32, 31] recomputed for the stored scales, packed as
// decodeQ6_K reads them. A block whose scales are all below 1e-15 is all zero bytes.
func quantizeQ6_K(src []float32, dst []byte) {
	var L [256]int8
	var scales [16]float32
	for b := range len(src) / 256 {
		x, blk := src[256*b:256*b+256], dst[210*b:210*b+210]
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		for j := range 16 {
			scales[j] = makeQX(32, x[16*j:16*j+16], L[16*j:16*j+16])
		}
		maxScale, maxAbs := absMaxSigned(scales[:])
		if maxAbs < groupMaxEps {
			clear(blk)
			continue
		}
		iscale := -128 / maxScale
		putF16(blk[208:], 1/iscale)
		for j := range 16 {
			sc[j] = uint8(int8(min(127, nearestInt(iscale*scales[j]))))
		}
		d := f16(blk[208:])
		for j := range 16 {
			dj := d * float32(int8(sc[j]))
			if dj == 0 {
				continue
			}
			for i := 16 * j; i < 16*j+16; i++ {
				L[i] = int8(max(-32, min(31, nearestInt(x[i]/dj))) + 32)
			}
		}
		for half := range 2 {
			lq, hq, Lh := ql[64*half:64*half+64], qh[32*half:32*half+32], L[128*half:128*half+128]
			for l := range 32 {
				q1, q2, q3, q4 := uint8(Lh[l]), uint8(Lh[l+32]), uint8(Lh[l+64]), uint8(Lh[l+96])
				lq[l] = q1&0x0F | (q3&0x0F)<<4
				lq[l+32] = q2&0x0F | (q4&0x0F)<<4
				hq[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	}
}
