//go:build !linux

package sources

func physicalMemory() uint64 { return 0 }
