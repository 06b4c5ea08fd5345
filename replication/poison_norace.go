//go:build !race

package replication

// poisonReleasedChunks: see poison_race.go.
const poisonReleasedChunks = false
