module github.com/aerokube/devtools

go 1.22

require (
	github.com/aandryashin/matchers v0.0.0-20161126170413-435295ea180e
	github.com/gorilla/websocket v1.5.1
	github.com/mafredri/cdp v0.34.1
)

require (
	github.com/google/go-cmp v0.6.0 // indirect
	golang.org/x/net v0.23.0 // indirect
	golang.org/x/sync v0.6.0 // indirect
)
