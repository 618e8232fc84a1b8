// Package sources holds the native sources of a pipeline, registered by
// kind (Register, New) as ops are by name, so that a host builds any of
// them from a spec without knowing its options:
//
//	range       integers, like Python's range (range.go)
//	sampler     a dataset of given items or indices, or one listed here
//	            (files under a directory or matching a glob, ImageNet-style
//	            class folders; listing.go, files.go), dealt out per epoch
//	            and rank by core/sampler (sampled.go)
//	webdataset  samples of WebDataset tar shards (tar.go)
//	table       rows of Parquet files and Arrow IPC files (table.go)
//
// The host adds its own kinds (capi registers "python"). A factory reads
// its options with core/options; the sampling group (core/sampler
// ReadOptions) and the remote-read group (core/storage ReadOptions) are
// parsed by their own packages, once.
//
// Listings are deterministic (sorted), so that a seeded sampler deals the
// same samples to the same ranks on every machine. Streaming sources
// (webdataset, table) deal shards or parts to ranks through the same
// sampler plan, read them ahead (readahead.go, spanfile.go), and resume a
// part-read epoch (resume.go). A shard or part that cannot be read fails
// as one item (pipeline.ItemFailure) and the epoch goes on.
package sources
