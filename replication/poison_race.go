//go:build race

package replication

// poisonReleasedChunks overwrites each arena chunk as it is released, so
// that anything reading an entry after its request was answered sees
// garbage (and a checksum that fails) instead of the bytes that happen to
// remain. It is on in race-detector builds, where the tests run, and off
// (compiled away) in every other build.
const poisonReleasedChunks = true
