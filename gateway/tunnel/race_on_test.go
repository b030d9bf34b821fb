//go:build race

package tunnel

const raceEnabled = true
