//go:build tools

// Package tools pins actionlint's main package so `go mod tidy` keeps its
// dependency graph in go.sum. scripts/bootstrap.sh builds it from here.
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
