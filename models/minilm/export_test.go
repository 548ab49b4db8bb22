package minilm

// ParseConfig is ConfigFromJSON on the content of a config.json, for the fuzz target.
var ParseConfig = parseConfig
