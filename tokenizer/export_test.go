package tokenizer

// ParseWordPieceJSON is NewWordPieceFromJSON on the content of a tokenizer.json, for the fuzz
// target.
var ParseWordPieceJSON = parseWordPieceJSON
