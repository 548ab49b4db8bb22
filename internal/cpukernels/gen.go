package cpukernels

//go:generate go run ../kernelreg/cmd/qk_targets -o qk_targets.h
