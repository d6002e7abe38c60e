package main

import (
	"encoding/json"

	"github.com/websummoner/websummoner/internal/bench"
)

func jsonLine(r *bench.Result) string {
	b, _ := json.Marshal(r)
	return string(b)
}
