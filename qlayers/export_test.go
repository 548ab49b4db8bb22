package qlayers

// LoadAdaptersFrom is LoadAdapters on the content of adapter_config.json and an opened
// adapter_model.safetensors, for the fuzz target.
var LoadAdaptersFrom = loadAdapters
