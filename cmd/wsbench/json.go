package main

import (
	"encoding/json"

	"github.com/websummoner/websummoner/internal/bench"
)

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func jsonLine(r *bench.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}
