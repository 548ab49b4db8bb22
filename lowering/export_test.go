package lowering

// PolyPairs exposes the arithmetic nibble decode to the external tests.
var PolyPairs = polyPairs
