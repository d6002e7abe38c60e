// Package webdriver holds the W3C WebDriver wire details the hub shares: error
// codes and their JSON bodies, capabilities parsing and JSONWire compatibility.
package webdriver

import (
	"encoding/json"
	"net/http"
)

// W3C error codes used by the hub (https://www.w3.org/TR/webdriver2/#errors).
const (
	ErrInvalidArgument      = "invalid argument"
	ErrInvalidSessionID     = "invalid session id"
	ErrSessionNotCreated    = "session not created"
	ErrUnknownCommand       = "unknown command"
	ErrUnknownError         = "unknown error"
	ErrUnknownMethod        = "unknown method"
	ErrTimeout              = "timeout"
	ErrUnsupportedOperation = "unsupported operation"
)

// ErrorBody is the W3C error response body: {"value":{"error":…,"message":…,"stacktrace":""}}.
type ErrorBody struct {
	Value ErrorValue `json:"value"`
}

// ErrorValue is the "value" member of an error body.
type ErrorValue struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	Stacktrace string `json:"stacktrace"`
}

// WriteError answers with status and a W3C error body. Headers already set on w
// (Retry-After, say) are kept.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(ErrorBody{Value: ErrorValue{Error: code, Message: message}})
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
