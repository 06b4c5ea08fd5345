package main

import (
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

func lw(client int, v string, off int64, call, ret int64) porcupine.Operation {
	out := linOutput{Offset: off}
	if off < 0 {
		out, ret = linOutput{Unknown: true}, math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: linInput{Write: true, Value: v}, Call: call, Output: out, Return: ret}
}

func lr(client int, v string, off int64, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: linInput{}, Call: call, Output: linOutput{Offset: off, Value: v}, Return: ret}
}

// The register model accepts what a linearizable log does and finds each
// way of not being one: a checker that cannot fail is not a checker.
func TestLinearizabilityChecker(t *testing.T) {
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"sequential", []porcupine.Operation{lr(0, "warmup", 1, 0, 1), lw(0, "a", 5, 2, 3), lr(1, "a", 5, 4, 5), lw(1, "b", 7, 6, 7), lr(0, "b", 7, 8, 9)}, porcupine.Ok},
		{"concurrent writes in either order", []porcupine.Operation{lw(0, "a", 8, 0, 10), lw(1, "b", 6, 0, 10), lr(2, "a", 8, 11, 12)}, porcupine.Ok},
		{"an unknown write seen later", []porcupine.Operation{lw(0, "x", -1, 0, 0), lr(1, "x", 9, 5, 6), lw(1, "y", 11, 7, 8), lr(0, "y", 11, 9, 10)}, porcupine.Ok},
		{"an unknown write never seen", []porcupine.Operation{lw(0, "x", -1, 0, 0), lr(1, "warmup", 1, 5, 6)}, porcupine.Ok},
		{"stale read", []porcupine.Operation{lw(0, "a", 5, 0, 1), lw(0, "b", 7, 2, 3), lr(1, "a", 5, 4, 5)}, porcupine.Illegal},
		{"offsets against real time", []porcupine.Operation{lw(0, "a", 7, 0, 1), lw(1, "b", 5, 2, 3)}, porcupine.Illegal},
		{"a value never written", []porcupine.Operation{lw(0, "a", 5, 0, 1), lr(1, "zzz", 6, 2, 3)}, porcupine.Illegal},
		{"a value at another offset", []porcupine.Operation{lw(0, "a", 5, 0, 1), lr(1, "a", 6, 2, 3)}, porcupine.Illegal},
	}
	for _, c := range cases {
		got, err := checkLinearizable(c.ops, 0, "")
		if err != nil || got != c.want {
			t.Errorf("%s: %v (%v), want %v", c.name, got, err, c.want)
		}
	}
}
