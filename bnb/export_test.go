package bnb

// Unexported names the external tests use.
var (
	SortLikeTorch     = sortLikeTorch
	KeyWeight         = keyWeight
	KeyAbsmax         = keyAbsmax
	KeyQuantMap       = keyQuantMap
	KeyNestedQuantMap = keyNestedQuantMap
	KeyQuantState     = keyQuantState
	KeyWeightFormat   = keyWeightFormat
)
