//go:build !linux

package ephemeralpg

// memoryDir finds no memory file system outside Linux.
func memoryDir(uint64) string { return "" }
